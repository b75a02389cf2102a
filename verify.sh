#!/usr/bin/env bash
# Drift check: is the stack's cluster on this host as its config says? Read-only, needs root.
# Usage: ./verify.sh STACK [HOST]   (HOST: with several hosts, the hosts[].name this machine is;
# exit status 1 on drift, the MISSING/FOREIGN/WRONG lines say what)
#        ./verify.sh STACK [HOST] --gpu   GPU acceptance check through Slurm on every node of this
# host: nvidia-smi -L against the GRES, allocated GPUs open and no other, a small CUDA computation
# ("stand-ins: skipped" for stand-in GPUs); exit status 1 on any FAIL
set -euo pipefail
cd "$(dirname "$0")"
source tools/setup.sh
ensure_venv
exec venv/bin/python -m ops.verify "$@"
