#!/usr/bin/env bash
# Installs the Python conformance peers (requirements.txt beside this file, exact versions: gguf-py,
# llama.cpp's own GGUF package, and numpy) into a venv at $1, once. A failure here fails the
# conformance tests: they are never skipped.
set -euo pipefail
dir=$1
here=$(cd "$(dirname "$0")" && pwd)
if [ -f "$dir/.installed" ] && cmp -s "$here/requirements.txt" "$dir/requirements.txt"; then exit 0; fi
rm -rf "$dir"
/usr/bin/python3 -m venv "$dir"
"$dir/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt"
"$dir/bin/python" -c 'import gguf.quants, numpy'
cp "$here/requirements.txt" "$dir/requirements.txt"
touch "$dir/.installed"
echo "python peers installed in $dir"
