#!/usr/bin/env bash
# etch serve, end to end on loopback: OpenAI's own client libraries (npm openai, PyPI openai) against the server
# (answers equal etch run's greedy tokens, streaming and not; stop strings; usage; the API key), bad
# requests (each a clear error, the server still up), clients that vanish mid-stream, and a load of
# 16 clients on 2 slots for LOAD_SECONDS (default 60), and the chat page in headless Chromium (a
# screenshot in BUILD_DIR/serve-page.png). Every connection goes to 127.0.0.1.
# usage: run.sh ETCH BUILD_DIR WORK_DIR
set -u
ETCH=$1 BUILD=$2 WORK=$3
here=$(cd "$(dirname "$0")" && pwd)
MODELS=${ETCH_MODELS_DIR:-$here/../../assets/models}
TOKS=${ETCH_TOKENIZERS_DIR:-$MODELS/../tokenizers}
S=$MODELS/stories260K
NPM=${ETCH_NPM_DIR:-$BUILD/npm}
rm -rf "$WORK"; mkdir -p "$WORK"
bash "$here/../conformance/npm_setup.sh" "$NPM" >/dev/null || { echo "0 passed, 1 failed"; exit 1; }
cp "$here"/*.mjs "$NPM/"

# The models: stories260K with the chatml template (real text, greedy references from etch run), and
# a slower synthetic Llama (23M parameters) for clients that vanish mid-answer.
"$ETCH" export --llama2c "$S/stories260K.bin" --tokenizer "$S/tok512.bin" --chat-template chatml -o "$WORK/stories.etch" 2>/dev/null
"$ETCH" synth --arch llama --tokenizer "$TOKS/mistral/tokenizer.json" --format gguf --dim 256 --hidden-dim 768 \
  --layers 8 --heads 4 --kv-heads 4 --context-len 4096 --seed 5 -o "$WORK/slow.gguf" >/dev/null
"$ETCH" export --gguf "$WORK/slow.gguf" -o "$WORK/slow.etch" --max-context-len 4096 2>/dev/null
# References from the command line.
"$ETCH" run "$WORK/stories.etch" -p "Once upon a time" -n 60 --json >"$WORK/ref-completion.json"
"$ETCH" run "$WORK/stories.etch" --chat --system "You tell stories." -p "Tell me about a cat." -n 40 --json >"$WORK/ref-chat.json"

start() { # start NAME ARGS...: a server on a free port; its port in $PORT, its pid in $PID
  local name=$1; shift
  "$ETCH" serve "$@" --port 0 2>"$WORK/$name.log" &
  PID=$!
  for _ in $(seq 100); do
    PORT=$(sed -n 's/.*http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$WORK/$name.log" | head -1)
    [ -n "$PORT" ] && return 0
    sleep 0.1
  done
  echo "server $name did not start: $(cat "$WORK/$name.log")"; return 1
}
rss() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }

fail=0
start main "$WORK/stories.etch" --slots 2 --queue 16 --timeout 2 || exit 1
MAIN_PID=$PID MAIN_PORT=$PORT
start keyed "$WORK/stories.etch" --slots 1 --api-key sekret || exit 1
KEY_PID=$PID KEY_PORT=$PORT
start slow "$WORK/slow.etch" --slots 1 --queue 2 -t 1 || exit 1
SLOW_PID=$PID SLOW_PORT=$PORT
rss_before=$(rss $MAIN_PID)
# Every answer says how long an idle connection stays open, so clients drop it first (server.c, queue)
keep=$(/usr/bin/python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1]).headers["Keep-Alive"])' \
  "http://127.0.0.1:$MAIN_PORT/health")
[ "$keep" = "timeout=2" ] || { echo "FAIL: /health says Keep-Alive: '$keep', not 'timeout=2'"; fail=1; }
cd "$NPM"
node openai_client.mjs "$MAIN_PORT" "$KEY_PORT" "$SLOW_PORT" "$WORK" || fail=1
node page.mjs "$MAIN_PORT" "$BUILD/serve-page.png" || fail=1
# PyPI's openai client too, in a virtual environment of Debian's python3 (openai pinned).
if [ ! -x "$BUILD/openai-venv/bin/python" ]; then
  /usr/bin/python3 -m venv "$BUILD/openai-venv" &&
    "$BUILD/openai-venv/bin/pip" install --quiet --disable-pip-version-check "openai==${OPENAI_PY_VERSION:-3.57.0}" >"$WORK/pip.log" 2>&1 ||
    { echo "FAIL: pip install openai: $(tail -3 "$WORK/pip.log")"; fail=1; }
fi
[ -x "$BUILD/openai-venv/bin/python" ] && { "$BUILD/openai-venv/bin/python" "$here/openai_client.py" "$MAIN_PORT" "$KEY_PORT" "$WORK" || fail=1; }
node load.mjs "$MAIN_PORT" "$WORK" "${LOAD_SECONDS:-60}" || fail=1
rss_after=$(rss $MAIN_PID)
echo "server RSS: ${rss_before} kB before the load, ${rss_after} kB after"
# Memory stays flat: the load may not grow the server by more than 16 MB (its slots were made at start).
# Under AddressSanitizer the quarantine holds freed memory on purpose; LeakSanitizer checks leaks there.
if [ -z "${ASAN_OPTIONS:-}" ]; then
  [ $((rss_after - rss_before)) -lt 16384 ] || { echo "FAIL: RSS grew by $((rss_after - rss_before)) kB"; fail=1; }
fi
for p in $MAIN_PID $KEY_PID $SLOW_PID; do kill -TERM "$p" 2>/dev/null; done
for p in $MAIN_PID $KEY_PID $SLOW_PID; do wait "$p" || { echo "FAIL: a server exited with $?"; fail=1; }; done
grep -i "AddressSanitizer\|runtime error" "$WORK"/*.log && fail=1
[ $fail -eq 0 ] && echo "serve: all checks passed"
exit $fail
