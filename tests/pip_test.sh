#!/usr/bin/env bash
# pip install of the Python package, as a Python user does it: a fresh virtual environment of
# Debian's python3, `pip install` of this checkout (setup.py builds libetch with CMake into the
# package; pip fetches setuptools from PyPI for the isolated build), then the package used with no
# ETCH_LIBRARY and no installed libetch.
# usage: pip_test.sh SOURCE_DIR WORK_DIR ETCH
set -euo pipefail
SRC=$1 WORK=$2 ETCH=$3 PROG=$2/stories.etch
S=${ETCH_MODELS_DIR:-$SRC/assets/models}/stories260K
rm -rf "$WORK"
mkdir -p "$WORK"
"$ETCH" export --llama2c "$S/stories260K.bin" --tokenizer "$S/tok512.bin" -o "$PROG" 2>/dev/null
/usr/bin/python3 -m venv "$WORK/venv"
"$WORK/venv/bin/pip" install --quiet --disable-pip-version-check "$SRC" >"$WORK/pip.log" 2>&1 ||
  { tail -20 "$WORK/pip.log"; echo "0 passed, 1 failed"; exit 1; }
cd "$WORK"
env -u ETCH_LIBRARY "$WORK/venv/bin/python" - "$PROG" <<'PY'
import os, sys
import etch
here = os.path.dirname(etch.__file__)
assert os.path.exists(os.path.join(here, "libetch.so.0")), "pip did not put libetch into the package"
with etch.ETModelForCausalLM(sys.argv[1]) as m:
    text = m.text_generation("Once upon a time", max_seq_len=20)
assert text.startswith("Once upon a time, there was a little girl named Lily"), text
print("pip: installed into a virtual environment with its own libetch:", text)
PY
echo "1 passed, 0 failed"
