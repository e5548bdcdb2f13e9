#!/usr/bin/env bash
# What calibration costs, by prefill and by generation, on the Qwen3-0.6B shapes (f16 program from
# bench/quant.sh or bench/vs_llamacpp.sh; seeded random weights, the real tokenizer and template).
# Samples: chat conversations built from tests/data/heldout.txt's stories as assistant answers to
# varied prompts, rendered with the Qwen3 template: about 16,000 tokens. Prints the prefill-mode
# calibration (all samples), plain batched prefill of the same lengths (`etch bench`) for the ratio,
# and generate mode (128 greedy tokens per sample) on the first GEN_SAMPLES samples.
#   bash bench/calib.sh   (THREADS=2 GEN_SAMPLES=16 CTX=1024)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
ETCH=$BUILD/etch
OUT=$BUILD/bench-vs-llamacpp
TOK=${ETCH_TOKENIZERS_DIR:-$(dirname "${ETCH_MODELS_DIR:-$ROOT/assets/models}")/tokenizers}
THREADS=${THREADS:-2} GEN_SAMPLES=${GEN_SAMPLES:-16} CTX=${CTX:-1024}
PROG=$OUT/qwen3-0.6b-f16-ctx$CTX-from-gguf.etch
mkdir -p "$OUT"
if [ ! -f "$PROG" ]; then
  [ -f "$OUT/qwen3-0.6b-f16.gguf" ] || "$ETCH" synth --arch qwen3 --preset qwen3-0.6b --tokenizer "$TOK/qwen3/tokenizer.json" \
    --format gguf --dtype f16 --seed 1 -o "$OUT/qwen3-0.6b-f16.gguf"
  "$ETCH" export --gguf "$OUT/qwen3-0.6b-f16.gguf" -o "$PROG" --max-context-len "$CTX"
fi
/usr/bin/python3 - "$ROOT/tests/data/heldout.txt" "$OUT/calib-16k.jsonl" <<'PY'
import json, sys
stories = [s.strip() for s in open(sys.argv[1], encoding="utf-8") if s.strip()]
asks = ["Tell me a story.", "Write a short story for a child.", "Can you tell me a bedtime story?",
        "I'd like a story about friendship.", "Tell me something that happened one day.",
        "Write a story with a happy ending.", "A story, please!", "Tell me a tale about animals.",
        "Make up a story for my little sister.", "What story can you tell me today?",
        "Tell me a story in simple words.", "Write a story that teaches a lesson.",
        "Tell me a story about being brave.", "Write a story that is kind.", "A short tale, please.",
        "Tell me a story before I sleep."]
with open(sys.argv[2], "w", encoding="utf-8") as f:
    for i, a in enumerate(asks):
        for j, s in enumerate(stories):
            msgs = [{"role": "system", "content": "You tell short stories."}, {"role": "user", "content": a},
                    {"role": "assistant", "content": s}]
            if (i + j) % 3 == 0:
                msgs[2]["reasoning_content"] = "A simple story with a clear ending."
            f.write(json.dumps({"messages": msgs}) + "\n")
PY
echo "== prefill mode (all samples)"
"$ETCH" quantize "$PROG" -o "$OUT/qwen3-0.6b-a8w8-prefill.etch" --scheme a8w8 --calib "$OUT/calib-16k.jsonl" -t "$THREADS" 2>&1 |
  grep -v "^  "
echo "== plain batched prefill of a 128-token prompt, the same program and threads"
"$ETCH" bench "$PROG" -p 128 -n 1 -t "$THREADS" -r 3 --no-sequential --json
echo "== generate mode (128 tokens per sample, first $GEN_SAMPLES samples)"
"$ETCH" quantize "$PROG" -o "$OUT/qwen3-0.6b-a8w8-generate.etch" --scheme a8w8 --calib "$OUT/calib-16k.jsonl" \
  --calib-mode generate --gen-tokens 128 --calib-limit "$GEN_SAMPLES" -t "$THREADS" 2>&1 | grep -v "^  "
echo "== prefill mode on the same $GEN_SAMPLES samples"
"$ETCH" quantize "$PROG" -o "$OUT/qwen3-0.6b-a8w8-prefill16.etch" --scheme a8w8 --calib "$OUT/calib-16k.jsonl" \
  --calib-limit "$GEN_SAMPLES" -t "$THREADS" 2>&1 | grep -v "^  "
