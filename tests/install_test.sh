#!/usr/bin/env bash
# cmake --install into a stage folder, then use etch as an embedder would: the example and the
# README's C snippet built with pkg-config against the installed library, the README's Python
# snippet run with the installed package (found beside the installed library, no ETCH_LIBRARY).
# usage: install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
BUILD=$1 SRC=$2 STAGE=$1/stage WORK=$1/install-test
MODELS=${ETCH_MODELS_DIR:-$SRC/assets/models}
rm -rf "$STAGE" "$WORK"
mkdir -p "$WORK"
cmake --install "$BUILD" --prefix "$STAGE" >/dev/null
PYDIR=$(dirname "$(find "$STAGE" -path '*-packages/etch/__init__.py' | head -1)")
PYDIR=$(dirname "$PYDIR")
# Installed where Debian's python3 looks when the prefix is /usr/local (its sys.path, not a CMake guess).
REL=${PYDIR#"$STAGE"/}
/usr/bin/python3 -c "import sys; sys.exit(0 if '/usr/local/$REL' in sys.path else 1)" ||
  { echo "the Python package went to $REL, which /usr/bin/python3 does not search under /usr/local"; exit 1; }
for f in include/etch.h lib/libetch.a lib/libetch.so.0 lib/pkgconfig/etch.pc bin/etch; do
  [ -e "$STAGE/$f" ] || { echo "not installed: $f"; exit 1; }
done
[ -f "$PYDIR/etch/__init__.py" ] || { echo "python package not installed"; exit 1; }
readelf -d "$STAGE/lib/libetch.so.0" | grep -q 'SONAME.*libetch.so.0' || { echo "no soname libetch.so.0"; exit 1; }
export PKG_CONFIG_PATH=$STAGE/lib/pkgconfig LD_LIBRARY_PATH=$STAGE/lib
"$STAGE/bin/etch" export --llama2c "$MODELS/stories260K/stories260K.bin" --tokenizer "$MODELS/stories260K/tok512.bin" \
  -o "$WORK/stories.etch" 2>/dev/null

# A user's build gets etch's include folder and nothing of its private dependencies.
case "$(pkg-config --cflags etch)" in *UTF8PROC*|*cjson*) echo "etch.pc leaks cflags: $(pkg-config --cflags etch)"; exit 1 ;; esac

# The example program.
cc -std=c11 -Wall -Werror "$SRC/examples/generate.c" $(pkg-config --cflags --libs etch) -o "$WORK/generate"
"$WORK/generate" "$WORK/stories.etch" "Once upon a time" 60 >"$WORK/generate.out"
grep -q "^Once upon a time, there was a little girl named Lily. She loved to play outside in the park.$" "$WORK/generate.out"
grep -q '^PyTorchObserver {"prompt_tokens": 5, "generated_tokens": 27,' "$WORK/generate.out"

# The README's snippets, exactly as the README shows them.
extract() { awk -v tag="<!-- readme-test: $1 -->" '$0 == tag {on = 1; next} on && /^```/ {if (started) exit; started = 1; next} on && started {print}' "$SRC/README.md"; }
extract c >"$WORK/hello.c"
extract python >"$WORK/hello.py"
[ -s "$WORK/hello.c" ] && [ -s "$WORK/hello.py" ] || { echo "README snippets not found"; exit 1; }
cc -std=c11 -Wall -Werror "$WORK/hello.c" $(pkg-config --cflags --libs etch) -o "$WORK/hello"
(cd "$WORK" && ./hello >hello-c.out)
grep -q "Once upon a time, there was a little girl named Lily" "$WORK/hello-c.out"
grep -q "^PyTorchObserver {" "$WORK/hello-c.out"
(cd "$WORK" && env -u ETCH_LIBRARY PYTHONPATH="$PYDIR" /usr/bin/python3 hello.py >hello-py.out)
grep -q "^Once upon a time, there was a little girl named Lily" "$WORK/hello-py.out"
grep -q "ms to first token" "$WORK/hello-py.out"
echo "install: library, header, etch.pc, command line and Python package work from $STAGE"
echo "4 passed, 0 failed"
