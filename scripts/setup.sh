#!/usr/bin/env bash
# Installs what etch needs to build and test on a fresh Debian 12 machine.
# Idempotent: installs only the packages that are missing. Needs root (or sudo).
set -euo pipefail

need=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
# build-essential: gcc, make; cmake, pkg-config: the build; libcjson-dev: JSON (import, tests);
# libpcre2-dev: tokenizer split regexes; libutf8proc-dev: NFC normalization; libmicrohttpd-dev: etch serve.
# python3-venv: the pip install test; chromium and a font: etch serve's chat page, driven headless.
# Tests only: python3-jinja2 renders real chat templates; nodejs and npm run the conformance peers
# (llama.cpp through node-llama-cpp, Hugging Face tokenizer semantics through @lenml); clang and its
# runtime libraries (libFuzzer, sanitizers) build the fuzzing harnesses.
for p in build-essential cmake pkg-config libcjson-dev libpcre2-dev libutf8proc-dev libmicrohttpd-dev python3-jinja2 python3-venv clang libclang-rt-14-dev chromium fonts-dejavu-core; do
  have_pkg "$p" || need+=("$p")
done
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v npm >/dev/null 2>&1 || need+=(npm)

if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
echo "setup: ok"
