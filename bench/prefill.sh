#!/usr/bin/env bash
# Time to first token with batched and sequential prefill on stories260K (about 98 prompt tokens),
# prompt and decode tokens/s. Figures, not a test. Run from the repository root: make bench
set -euo pipefail
MODELS=${ETCH_MODELS_DIR:-$(cd "$(dirname "$0")/.." && pwd)/assets/models}
S=$MODELS/stories260K
OUT=${BUILD:-build}/bench
mkdir -p "$OUT"
build/etch export --llama2c "$S/stories260K.bin" --tokenizer "$S/tok512.bin" -o "$OUT/stories260K.etch"
# A prompt of 98 tokens (real text), 128 decoded tokens, one thread, medians of 15 runs.
build/etch bench "$OUT/stories260K.etch" -p 98 -n 128 -t 1 -r "${RUNS:-15}"
