#!/usr/bin/env bash
# Debian packages the test suite needs besides the virtualenv and the jar cache: chromium for
# the browser test, postgresql for Dagster's storage in the distributed tests. `make test`
# installs the missing ones when this user can (root, or sudo without a password); otherwise it
# says what is missing and the tests that need them are skipped, each saying so.
set -euo pipefail
missing=()
command -v chromium >/dev/null || missing+=(chromium)
compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null || missing+=(postgresql)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ]; then
  sudo=()
elif sudo -n true 2>/dev/null; then
  sudo=(sudo -n)
else
  echo "make test: missing Debian packages: ${missing[*]}; the tests that need them will be" \
    "skipped. Install them with: sudo apt-get install ${missing[*]}"
  exit 0
fi
echo "make test: installing Debian packages: ${missing[*]}"
"${sudo[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
