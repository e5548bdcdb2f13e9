#!/usr/bin/env bash
# The main job: export stories260K ahead of time, then generate a story with ExecuTorch-style stats.
# Run from the repository root after a build: make demo
set -euo pipefail
MODELS=${ETCH_MODELS_DIR:-$(cd "$(dirname "$0")/.." && pwd)/assets/models}
S=$MODELS/stories260K
if [ ! -f "$S/stories260K.bin" ]; then
  echo "demo: stories260K not found in $MODELS (set ETCH_MODELS_DIR to the folder holding stories260K/)" >&2
  exit 1
fi
OUT=${BUILD:-build}/demo
mkdir -p "$OUT"
echo "== export (ahead of time): $S -> $OUT/stories260K.etch"
build/etch export --llama2c "$S/stories260K.bin" --tokenizer "$S/tok512.bin" -o "$OUT/stories260K.etch"
echo
echo "== inspect"
build/etch inspect "$OUT/stories260K.etch" | sed -n '1,24p'
echo
echo "== run: batched prefill, greedy, 200 tokens, stats"
build/etch run "$OUT/stories260K.etch" -p "${PROMPT:-Once upon a time}" -n "${TOKENS:-200}" --stats --verbose
