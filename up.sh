#!/usr/bin/env bash
# Bring up a stack on this machine: the pinned Pulumi CLI, the venv and requirements, then
# `pulumi up` through ./pulumi.sh (local state in .pulumi-state/).
# Usage: ./up.sh [stack] [pulumi up arguments]  (default: local)
set -euo pipefail
cd "$(dirname "$0")"
stack=${1:-local}
shift || true

# The CLI first: offline, this is the step that stops, and it says what to do instead.
tools/pulumi-cli.sh >/dev/null

[ -x venv/bin/python ] || python3 -m venv venv
venv/bin/python -m pip install -q --disable-pip-version-check -r requirements.txt

./pulumi.sh stack select --create "$stack"
exec ./pulumi.sh up --stack "$stack" "$@"
