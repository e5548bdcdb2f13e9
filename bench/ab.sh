#!/usr/bin/env bash
# Two or more etch binaries (a change against its parent) and, with GGUF=, llama.cpp, on one program,
# in rotating order: round i starts with a different one, so neither side always runs first (on a
# shared machine the first and the last of a round measured differently). Prints each one's medians,
# the medians of its per-round prefill and decode ratios to the first binary, and every round's figures. Figures, not a test. From the repository root, after `make`:
#   BINS="/tmp/etch-before build/etch" bash bench/ab.sh PROGRAM.etch
#   (GGUF=MODEL.gguf LENGTH=128 NGEN=16 ROUNDS=8 THREADS=2; ETCH_KERNELS passes through to etch)
# With GGUF= the peer is node-llama-cpp's prebuilt llama.cpp; LLAMA_BENCH=PATH/llama-bench adds a
# llama.cpp you built yourself as one more side (its pp LENGTH, then tg NGEN at depth LENGTH: the
# same two phases without node's per-token sampling and callbacks; this script never builds it).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
PROG=${1:?usage: BINS="A B" bash bench/ab.sh PROGRAM.etch}
read -r -a BINS <<<"${BINS:-$BUILD/etch}"
LENGTH=${LENGTH:-128} NGEN=${NGEN:-16} ROUNDS=${ROUNDS:-8} THREADS=${THREADS:-2} GGUF=${GGUF:-}
LLAMA_BENCH=${LLAMA_BENCH:-}
NPM=${ETCH_NPM_DIR:-$BUILD/npm}
if [ -n "$GGUF" ]; then
  bash "$ROOT/tests/conformance/npm_setup.sh" "$NPM" >/dev/null
  cp "$ROOT/bench/llamacpp.mjs" "$NPM/bench_llamacpp.mjs"
fi
N=${#BINS[@]} SIDES=${#BINS[@]}
[ -n "$GGUF" ] && SIDES=$((SIDES + 1))
[ -n "$GGUF" ] && [ -n "$LLAMA_BENCH" ] && SIDES=$((SIDES + 1))
llama_bench_avg() { # llama_bench_avg ARGS...: its tokens/s, the mean of -r 1 (one line of jsonl)
  "$LLAMA_BENCH" -m "$GGUF" -t "$THREADS" -r 1 -o jsonl "$@" 2>/dev/null |
    /usr/bin/python3 -c 'import json, sys; print(json.loads(sys.stdin.readline())["avg_ts"])'
}
RUNS=$(mktemp)
trap 'rm -f "$RUNS"' EXIT
for round in $(seq 1 "$ROUNDS"); do
  for j in $(seq 0 $((SIDES - 1))); do
    k=$(((round + j) % SIDES))
    if [ "$k" -eq $((N + 1)) ]; then
      pp=$(llama_bench_avg -p "$LENGTH" -n 0) tg=$(llama_bench_avg -p 0 -n "$NGEN" -d "$LENGTH")
      echo "{\"side\": \"llama-bench\", \"prefill_tok_s\": $pp, \"decode_tok_s\": $tg}" >>"$RUNS"
    elif [ "$k" -eq "$N" ]; then
      node "$NPM/bench_llamacpp.mjs" "$GGUF" "$THREADS" "$LENGTH" "$NGEN" 1 | sed 's/^{/{"side": "llama.cpp", /' >>"$RUNS"
    else
      "${BINS[$k]}" bench "$PROG" -p "$LENGTH" -n "$NGEN" -t "$THREADS" -r 1 --no-sequential --no-roofline --json \
        | sed "s|^{|{\"side\": \"$k: ${BINS[$k]}\", |" >>"$RUNS"
    fi
  done
  echo "round $round/$ROUNDS done" >&2
done
/usr/bin/python3 - "$RUNS" <<'PY'
import json, statistics, sys
from collections import defaultdict
by = defaultdict(list)
for line in open(sys.argv[1]):
    r = json.loads(line)
    by[r["side"]].append((r["prefill_tok_s"], r["decode_tok_s"]))
# a round's sides run within seconds of each other, so the median of the per-round ratios to the
# first side is steadier than the ratio of the medians where the machine drifts from round to round
first = sorted(by)[0]
print(f"| side | prefill tok/s (median) | decode tok/s (median) | prefill / {first.split(':')[0]}'s, per round (median) "
      f"| decode / {first.split(':')[0]}'s, per round (median) | prefill by round | decode by round |")
print("|---|---|---|---|---|---|---|")
for side in sorted(by):
    v, f = by[side], by[first]
    ratio = statistics.median(p / q for (p, _), (q, _) in zip(v, f))
    dratio = statistics.median(d / e for (_, d), (_, e) in zip(v, f))
    print(f"| {side} | {statistics.median(p for p, _ in v):.1f} | {statistics.median(d for _, d in v):.2f} | "
          f"{ratio:.2f}x | {dratio:.2f}x | " + ", ".join(f"{p:.0f}" for p, _ in v) + " | "
          + ", ".join(f"{d:.1f}" for _, d in v) + " |")
PY
