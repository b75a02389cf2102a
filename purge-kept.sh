#!/usr/bin/env bash
# Remove what destroy deliberately kept: /var/cache/gpucluster/CLUSTER (the built node image,
# node-image-KEY, the list of packages a cluster installed and left installed, and the dump
# of its accounting database, the images and CA of its registry).
# Usage: ./purge-kept.sh CLUSTER | --all | --cli
#   --all: every cluster's, and the host's cache of node image packages (node-packages/).
#   --cli: the Pulumi CLIs built from Go modules (tools/pulumi-cli.sh purge).
# Packages themselves are never removed here: `apt-get remove` of them is the operator's call.
set -euo pipefail
keep_dir=/var/cache/gpucluster
case "${1-}" in
  --cli) exec "$(dirname "$0")/tools/pulumi-cli.sh" purge ;;
  --all) targets=("$keep_dir") ;;
  "" | -*) echo "usage: $0 CLUSTER | --all | --cli" >&2; exit 2 ;;
  *) [[ "$1" =~ ^[a-z][a-z0-9]{0,9}$ ]] || { echo "not a cluster name: $1" >&2; exit 2; }
     targets=("$keep_dir/$1") ;;
esac
for target in "${targets[@]}"; do
  [ -e "$target" ] || { echo "nothing kept at $target"; continue; }
  find "$target" -name packages-left-installed -exec sh -c 'echo "packages left installed ($1): $(paste -sd" " "$1")"' sh {} \;
  find "$target" -maxdepth 3 -path '*/accounting/*' -exec echo "accounting database removed: {}" \;
  find "$target" -maxdepth 2 -type d -name registry -exec sh -c 'echo "registry images and CA removed: $1 ($(du -sh "$1" | cut -f1))"' sh {} \;
  find "$target" -maxdepth 2 -type d -name 'node-image-*' -exec sh -c 'echo "node image $1: $(du -sh "$1" | cut -f1)"' sh {} \;
  rm -rf "$target"
  echo "removed $target"
done
rmdir "$keep_dir" 2>/dev/null || true
