#!/usr/bin/env bash
# Run every test: unit tests under Pulumi mocks, rendering checks against real Slurm/LXC,
# and the end-to-end bring-up of the `e2e` stack on this machine (needs root).
# Usage: ./test.sh [pytest arguments]
set -euo pipefail
cd "$(dirname "$0")"
source tools/setup.sh

# Debian packages the rendering and end-to-end tests use (installed when missing, as root).
mapfile -t packages < tests/debian-packages.txt
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed' || missing+=("$package")
done
if [ "${#missing[@]}" -gt 0 ]; then
  [ "$(id -u)" = 0 ] || { echo "missing Debian packages: ${missing[*]} (run as root to install them)" >&2; exit 1; }
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}"
fi

ensure_venv test
venv/bin/python -m ruff check .
venv/bin/python -m ruff format --check .
# Two workers: the tests that change nothing on the host run beside the host's own, which go
# to one worker one at a time (tests/conftest.py HOST_NEUTRAL). `-n 0` runs everything serially.
exec venv/bin/python -m pytest -n 2 --dist loadgroup "$@"
