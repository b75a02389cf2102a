#!/usr/bin/env bash
# The operator's view of a stack's cluster: hosts (answering, drift), nodes and their GPUs,
# drain reasons, the queue, the web app's URL and this month's GPU cost per account.
# Usage: ./status.sh STACK [--json] | --help   (exit status 1 when something did not answer or drifted)
set -euo pipefail
cd "$(dirname "$0")"
[ -x venv/bin/python ] || { python3 -m venv venv && venv/bin/python -m pip install -q -r requirements.txt; }
exec venv/bin/python -m ops.status "$@"
