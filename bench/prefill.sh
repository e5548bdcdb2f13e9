#!/usr/bin/env bash
# Time to first token with batched and sequential prefill on stories260K (about 98 prompt tokens),
# prompt and decode tokens/s. Figures, not a test. Run from the repository root: make bench
set -euo pipefail
MODELS=${ETCH_MODELS_DIR:-$(cd "$(dirname "$0")/../.." && pwd)/shared/models}
S=$MODELS/stories260K
OUT=${BUILD:-build}/bench
mkdir -p "$OUT"
build/etch export --llama2c "$S/stories260K.bin" --tokenizer "$S/tok512.bin" -o "$OUT/stories260K.etch"
build/etch-bench-prefill "$OUT/stories260K.etch" -r "${RUNS:-15}" -n 128
