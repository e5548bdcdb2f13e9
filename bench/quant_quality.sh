#!/usr/bin/env bash
# Quality of every quantization scheme on held-out text against the float program: perplexity,
# KL(float || quantized) mean and 99th percentile, top-1 agreement (`etch eval`), for stories260K and
# a synthetic Qwen3 (3 layers, dim 256, the real tokenizer; random weights, std 0.15, so its own
# perplexity is meaningless and its top-1 choices are often near-ties: KL is the figure to read). a8w8 is calibrated twice on the same
# samples, by prefill and by generation (128 tokens per sample). Held-out text: tests/data/heldout.txt;
# calibration: tests/data/story.txt (stories260K) and tests/data/calib_chat.jsonl (Qwen3, chat
# template applied). From the repository root, after `make`: bash bench/quant_quality.sh
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
ETCH=$BUILD/etch
OUT=$BUILD/quant-quality
MODELS=${ETCH_MODELS_DIR:-$ROOT/assets/models}
TOK=${ETCH_TOKENIZERS_DIR:-$(dirname "$MODELS")/tokenizers}
mkdir -p "$OUT"
"$ETCH" export --llama2c "$MODELS/stories260K/stories260K.bin" --tokenizer "$MODELS/stories260K/tok512.bin" \
  -o "$OUT/stories.etch" 2>/dev/null
"$ETCH" synth --arch qwen3 --tokenizer "$TOK/qwen3/tokenizer.json" --format hf --seed 7 --layers 3 --dim 256 \
  --hidden-dim 768 --heads 4 --kv-heads 2 --head-dim 64 --std 0.15 -o "$OUT/qwen3-hf" 2>/dev/null
"$ETCH" export --hf "$OUT/qwen3-hf" -o "$OUT/qwen3.etch" --max-context-len 512 2>/dev/null
# bf16 exports: what rounding to 8 bits of mantissa costs, for scale
"$ETCH" export --llama2c "$MODELS/stories260K/stories260K.bin" --tokenizer "$MODELS/stories260K/tok512.bin" \
  -o "$OUT/stories-bf16.etch" --dtype bf16 2>/dev/null
"$ETCH" export --hf "$OUT/qwen3-hf" -o "$OUT/qwen3-bf16.etch" --max-context-len 512 --dtype bf16 2>/dev/null
row() { # model label program
  "$ETCH" eval "$3" --text "$ROOT/tests/data/heldout.txt" --ctx 128 --ref "$OUT/$1.etch" --json |
    /usr/bin/python3 -c 'import json,sys; r=json.load(sys.stdin); print("| %s | %s | %.4f | %.4f | %.3g | %.3g | %.2f%% |" % (sys.argv[1], sys.argv[2], r["perplexity"], r["ref_perplexity"], r["kl_mean"], r["kl_p99"], 100*r["top1_agreement"]))' "$1" "$2"
}
echo "| model | scheme | perplexity | float perplexity | KL mean | KL p99 | top-1 |"
echo "|---|---|---|---|---|---|---|"
for m in stories qwen3; do
  calib=$ROOT/tests/data/story.txt; [ $m = qwen3 ] && calib=$ROOT/tests/data/calib_chat.jsonl
  row $m "bf16 (not quantized)" "$OUT/$m-bf16.etch"
  for s in 8w 4w 8da8w 8da4w; do
    "$ETCH" quantize "$OUT/$m.etch" -o "$OUT/$m-$s.etch" --scheme "$s" 2>/dev/null
    row $m "$s" "$OUT/$m-$s.etch"
  done
  for mode in prefill generate; do
    "$ETCH" quantize "$OUT/$m.etch" -o "$OUT/$m-a8w8-$mode.etch" --scheme a8w8 --calib "$calib" --calib-mode $mode \
      2>"$OUT/$m-a8w8-$mode.log"
    row $m "a8w8 (calibrated by $mode: $(grep -o '[0-9]* tokens observed' "$OUT/$m-a8w8-$mode.log"))" "$OUT/$m-a8w8-$mode.etch"
  done
done
