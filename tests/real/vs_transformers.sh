#!/usr/bin/env bash
# etch, llama.cpp and Hugging Face transformers on the same real GGUF files (vs_transformers.py says
# what is compared); fails unless etch with f32 activations (the file's arithmetic) picks transformers'
# next token at 99% of the positions of each model (MIN_AGREE), and etch's default program (int8
# activations, as llama.cpp rounds them) at llama.cpp's own agreement less one point. Run by CI (.ci/run) after `make test`, not by `make test` itself: torch and
# transformers from PyPI (tests/real/requirements-transformers.txt) are about 4 GB, installed on first
# use into a venv (VENV, default build/transformers-venv). It reuses what tests/real/run.sh leaves in
# build/real-work (the programs and llama.cpp's continuations).
# From the repository root, after `make test`:  bash tests/real/vs_transformers.sh
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build}
VENV=${VENV:-$BUILD/transformers-venv}
CACHE=${ETCH_REAL_MODELS_DIR:-$BUILD/real-models}
WORK=$BUILD/real-work
for f in "$CACHE/SmolLM2-135M-Instruct.Q4_1.gguf" "$CACHE/gemma-3-270m-q4_k_m.gguf" "$WORK/smol.etch" "$WORK/smol-w.etch" \
         "$WORK/smol-llamacpp.json" "$WORK/gemma.etch" "$WORK/gemma-w.etch" "$WORK/gemma-llamacpp.json"; do
  [ -f "$f" ] || { echo "vs_transformers: $f is missing: run \`make test\` first (tests/real/run.sh makes it)" >&2; exit 1; }
done
REQ=$ROOT/tests/real/requirements-transformers.txt
if [ ! -x "$VENV/bin/python" ] || ! cmp -s "$REQ" "$VENV/requirements.txt"; then
  # The wheels with their CUDA dependencies take about 6 GB installed; without pip's cache no second
  # copy of the downloads stays behind. Too little room ends here, with a message, not in pip's ENOSPC.
  mkdir -p "$BUILD"
  free_gb=$(df -P -BG "$BUILD" | awk 'NR == 2 { sub("G", "", $4); print $4 }')
  if [ "$free_gb" -lt "${VENV_MIN_FREE_GB:-10}" ]; then
    echo "vs_transformers: only ${free_gb} GB free on the disk of $BUILD; installing torch and transformers needs about ${VENV_MIN_FREE_GB:-10} GB" >&2
    exit 1
  fi
  echo "installing $(grep -v '^#' "$REQ" | tr '\n' ' ')into $VENV" >&2
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check --no-cache-dir -r "$REQ"
  cp "$REQ" "$VENV/requirements.txt" # what is installed, so a changed pin installs again
fi
fail=0
for m in smol:SmolLM2-135M-Instruct.Q4_1.gguf gemma:gemma-3-270m-q4_k_m.gguf; do
  HF_HUB_OFFLINE=1 TQDM_DISABLE=1 PYTHONPATH=$ROOT/python ETCH_LIBRARY=$BUILD/libetch.so "$VENV/bin/python" "$ROOT/tests/real/vs_transformers.py" \
    "$CACHE/${m#*:}" "$WORK/${m%%:*}-llamacpp.json" "$WORK/${m%%:*}-w.etch" "${MIN_AGREE:-0.99}" "$WORK/${m%%:*}.etch" llama.cpp || fail=1
done
exit $fail
