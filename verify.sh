#!/usr/bin/env bash
# Drift check: is the stack's cluster on this host as its config says? Read-only, needs root.
# Usage: ./verify.sh STACK [HOST]   (HOST: with several hosts, the hosts[].name this machine is;
# exit status 1 on drift, the MISSING/FOREIGN/WRONG lines say what)
set -euo pipefail
cd "$(dirname "$0")"
source tools/setup.sh
ensure_venv
exec venv/bin/python -m ops.verify "$@"
