#!/usr/bin/env bash
# Installs what etch needs to build and test on a fresh Debian 12 machine.
# Idempotent: installs only the packages that are missing. Needs root (or sudo).
set -euo pipefail

need=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
# build-essential: gcc, make; cmake, pkg-config: the build; libcjson-dev: JSON (import, tests);
# libpcre2-dev: tokenizer split regexes; libutf8proc-dev: NFC normalization.
for p in build-essential cmake pkg-config libcjson-dev libpcre2-dev libutf8proc-dev; do
  have_pkg "$p" || need+=("$p")
done

if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
echo "setup: ok"
