#!/usr/bin/env bash
# Debian packages outside the virtualenv and the jar cache, installed when missing and this user
# can (root, or sudo without a password); otherwise it says what is missing and goes on, and
# what needs them says so when used. Usage: install_debian_packages.sh PURPOSE PACKAGE...
#   runtime: libjemalloc2, the driver JVMs' allocator (streaming/spark/session.py)
#   tests:   chromium for the browser tests, postgresql for Dagster's storage in the
#            distributed tests
set -euo pipefail
purpose=$1
shift
missing=()
for package in "$@"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$package")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if ! command -v apt-get >/dev/null; then
  echo "tidelake ($purpose): not a Debian system; install the equivalents of: ${missing[*]}"
  exit 0
elif [ "$(id -u)" = 0 ]; then
  sudo=()
elif sudo -n true 2>/dev/null; then
  sudo=(sudo -n)
else
  echo "tidelake ($purpose): missing Debian packages: ${missing[*]}; what needs them will say" \
    "so. Install them with: sudo apt-get install ${missing[*]}"
  exit 0
fi
echo "tidelake ($purpose): installing Debian packages: ${missing[*]}"
"${sudo[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
