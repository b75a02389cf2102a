#!/usr/bin/env bash
# Bring up a stack on this machine: the pinned Pulumi CLI, the venv and requirements, then
# `pulumi up` through ./pulumi.sh (local state in .pulumi-state/).
# Usage: ./up.sh [STACK] [pulumi up arguments]
#   STACK: a stacks/Pulumi.STACK.yaml; without one, `local` (one real GPU) where the NVIDIA
#   driver is loaded, else `nogpu` (stand-in GPUs).
set -euo pipefail
cd "$(dirname "$0")"
source tools/setup.sh

if [ $# -eq 0 ] || [[ $1 == -* ]]; then
  if nvidia_driver_loaded; then
    stack=local
    echo "the NVIDIA driver is loaded: bringing up the GPU stack local (./up.sh local)" >&2
  else
    stack=nogpu
    echo "no NVIDIA driver here (${NVIDIA_DRIVER_PROC:-/proc/driver/nvidia} is missing): bringing up the GPU-less" \
      "stack nogpu, stand-in GPUs that Slurm schedules but no CUDA job can use (./up.sh nogpu)." \
      "The GPU stack local needs the driver loaded." >&2
  fi
else
  stack=$1
  shift
fi
if [ ! -f "stacks/Pulumi.$stack.yaml" ]; then
  echo "error: no stack $stack: stacks/Pulumi.$stack.yaml does not exist. Stacks:" \
    "$(cd stacks && ls Pulumi.*.yaml | sed 's/^Pulumi\.\(.*\)\.yaml$/\1/' | tr '\n' ' ')" >&2
  echo "  a new one: venv/bin/python -m review.stacks new-site NAME --nodes N" >&2
  exit 2
fi

# The CLI first: offline, this is the step that stops, and it says what to do instead.
tools/pulumi-cli.sh >/dev/null

ensure_venv

./pulumi.sh stack select --create "$stack"
exec ./pulumi.sh up --stack "$stack" "$@"
