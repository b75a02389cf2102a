"""Operator tools run beside the stack: `./status.sh`."""
