#!/usr/bin/env bash
# etch beside llama.cpp on the same weights and machine, in one invocation: the Qwen3-0.6B preset
# written by `etch synth` as an F16 GGUF (real shapes, real tokenizer, random weights), exported by
# etch; then, for ROUNDS rounds, each implementation in turn (etch, llama.cpp, etch, ...) measures
# every prompt length. Prints medians and ratios, and writes an SVG plot of prompt tokens/s against
# prompt length. Figures, not a test. From the repository root, after `make`:
#   bash bench/vs_llamacpp.sh   (THREADS=2 LENGTHS=32,64,128,256,512 NGEN=64 ROUNDS=3 REPS=2 DTYPE=f16)
# DTYPE (f16, bf16, f32) is the weight type of the GGUF both read and of etch's program.
# PRESET=gemma3-1b measures the Gemma-3 1B shapes instead (sliding window 512 in 22 of 26 layers);
# CTX sets the program's context (default 1024). KV (f16 by default, f32, q8) is the KV cache of both
# (llama.cpp's q8_0 for q8, with its flash attention, which a quantized V cache needs there).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
OUT=$BUILD/bench-vs-llamacpp
TOK=${ETCH_TOKENIZERS_DIR:-$(dirname "${ETCH_MODELS_DIR:-$ROOT/assets/models}")/tokenizers}
THREADS=${THREADS:-2} LENGTHS=${LENGTHS:-32,64,128,256,512} NGEN=${NGEN:-64} ROUNDS=${ROUNDS:-3} REPS=${REPS:-2}
DTYPE=${DTYPE:-f16} PRESET=${PRESET:-qwen3-0.6b} CTX=${CTX:-1024} KV=${KV:-f16}
case "$KV" in f16|f32) LKV=$KV ;; q8) LKV=q8_0 ;; *) echo "KV is f16, f32 or q8" >&2; exit 2 ;; esac
case "$PRESET" in qwen3-0.6b) ARCH=qwen3 NAME="Qwen3-0.6B" ;; gemma3-1b) ARCH=gemma3 NAME="Gemma-3-1B" ;;
  *) echo "PRESET is qwen3-0.6b or gemma3-1b" >&2; exit 2 ;; esac
NPM=${ETCH_NPM_DIR:-$BUILD/npm}
mkdir -p "$OUT"
bash "$ROOT/tests/conformance/npm_setup.sh" "$NPM" >/dev/null
cp "$ROOT/bench/llamacpp.mjs" "$NPM/bench_llamacpp.mjs"
GGUF=$OUT/$PRESET-$DTYPE.gguf PROG=$OUT/$PRESET-$DTYPE-ctx$CTX-from-gguf.etch TAG=$PRESET-$DTYPE-ctx$CTX-kv$KV-p${LENGTHS//,/_}
RUNS=$OUT/runs-$TAG.jsonl # one file per configuration: a later run of another one keeps it
[ -f "$GGUF" ] || "$BUILD/etch" synth --arch "$ARCH" --preset "$PRESET" --tokenizer "$TOK/qwen3/tokenizer.json" \
  --format gguf --dtype "$DTYPE" --seed 1 -o "$GGUF"
[ -f "$PROG" ] || "$BUILD/etch" export --gguf "$GGUF" -o "$PROG" --max-context-len "$CTX"
: >"$RUNS"
for round in $(seq 1 "$ROUNDS"); do
  echo "round $round/$ROUNDS: etch" >&2
  "$BUILD/etch" bench "$PROG" -p "$LENGTHS" -n "$NGEN" -t "$THREADS" -r "$REPS" --kv-type "$KV" --no-sequential --json \
    | sed 's/^{/{"impl": "etch", /' >>"$RUNS"
  echo "round $round/$ROUNDS: llama.cpp" >&2
  node "$NPM/bench_llamacpp.mjs" "$GGUF" "$THREADS" "$LENGTHS" "$NGEN" "$REPS" "$LKV" >>"$RUNS"
done
/usr/bin/python3 "$ROOT/bench/report.py" "$RUNS" "$OUT/prefill-$TAG.svg" "$NAME $DTYPE, KV $KV"
echo "runs: $RUNS, plot: $OUT/prefill-$TAG.svg"
