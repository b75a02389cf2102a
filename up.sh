#!/usr/bin/env bash
# Bring up a stack on this machine: venv, requirements, the Pulumi CLI if missing, a local
# state backend, then `pulumi up`. Usage: ./up.sh [stack] [pulumi up arguments]  (default: local)
set -euo pipefail
cd "$(dirname "$0")"
stack=${1:-local}
shift || true

[ -x venv/bin/python ] || python3 -m venv venv
venv/bin/python -m pip install -q --disable-pip-version-check -r requirements.txt

if ! command -v pulumi >/dev/null; then
  curl -fsSL https://get.pulumi.com | sh
  export PATH="$HOME/.pulumi/bin:$PATH"
fi

# State stays on this machine, next to the project; the passphrase protects its secrets.
mkdir -p .pulumi-state
export PULUMI_BACKEND_URL="file://$PWD/.pulumi-state"
export PULUMI_CONFIG_PASSPHRASE="${PULUMI_CONFIG_PASSPHRASE:-}"
pulumi stack select --create "$stack"
pulumi up --stack "$stack" "$@"
