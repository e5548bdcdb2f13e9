#!/usr/bin/env bash
# etch serve under load: requests/s and time to first token (p50, p99) at 1, 2 and 4 concurrent
# clients, and the server's own overhead: its time to first token against etch run's on the same
# prompt. Figures, not a test. From the repository root, after `make`:
#   bash bench/serve.sh PROGRAM.etch   (SLOTS=2 SECONDS=20 MAX_TOKENS=32 THREADS: per slot)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
PROG=${1:?usage: bench/serve.sh PROGRAM.etch}
SLOTS=${SLOTS:-2} SECONDS_PER=${SECONDS:-20} MAX_TOKENS=${MAX_TOKENS:-32}
NPM=${ETCH_NPM_DIR:-$BUILD/npm}
bash "$ROOT/tests/conformance/npm_setup.sh" "$NPM" >/dev/null
cp "$ROOT/bench/serve_load.mjs" "$NPM/"
LOG=$(mktemp)
"$BUILD/etch" serve "$PROG" --port 0 --slots "$SLOTS" ${THREADS:+-t $THREADS} 2>"$LOG" &
PID=$!
trap 'kill $PID 2>/dev/null; rm -f "$LOG"' EXIT
for _ in $(seq 100); do PORT=$(sed -n 's/.*http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$LOG"); [ -n "$PORT" ] && break; sleep 0.1; done
PROMPT="The history of computing is a story of ideas that took decades to become practical. Tell me more."
# etch run's time to first token on the same prompt (a fresh process: its first call pays page faults
# too, as the server's first request does; the best of three either way).
RUN_TTFT=$(for _ in 1 2 3; do "$BUILD/etch" run "$PROG" -p "$PROMPT" -n 1 --json ${THREADS:+-t $THREADS} |
  python3 -c 'import json,sys; s=json.load(sys.stdin)["stats"]; print(s["first_token_ms"]-s["inference_start_ms"])'; done | sort -n | head -1)
echo "$(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $PROG; $SLOTS slots"
node "$NPM/serve_load.mjs" "$PORT" "$PROMPT" "$SECONDS_PER" "$MAX_TOKENS" "$RUN_TTFT"
