#!/usr/bin/env bash
# Tear a stack down: `pulumi destroy` through ./pulumi.sh. Pulumi shows everything it will
# remove and asks before it starts; --yes skips that question.
# Usage: ./down.sh STACK [--yes] [pulumi destroy arguments]
set -euo pipefail
cd "$(dirname "$0")"
if [ $# -lt 1 ] || [[ $1 == -* ]]; then
  echo "usage: ./down.sh STACK [--yes] [pulumi destroy arguments]" >&2
  exit 64
fi
stack=$1
shift
echo "destroying stack $stack: its containers, bridges, NAT rules, daemons and files on this machine" >&2
exec ./pulumi.sh destroy --stack "$stack" "$@"
