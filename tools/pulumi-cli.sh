#!/usr/bin/env bash
# The Pulumi CLI this project runs with: one pinned release, checked against its SHA-256
# before anything is unpacked.
#
#   tools/pulumi-cli.sh
#       print the directory holding the pinned `pulumi`: the project's .pulumi-cli/, else a
#       `pulumi` of the pinned version on PATH; when neither, install it into .pulumi-cli/ from
#       $PULUMI_TARBALL (a release tarball already on this machine) or by download
#       ($PULUMI_CLI_URL names a mirror of the same file).
#   tools/pulumi-cli.sh install SOURCE SHA256 DEST
#       fetch SOURCE (a URL or a file), check its SHA-256, unpack its pulumi/ into DEST.
set -euo pipefail

VERSION=3.253.0
# SHA-256 of pulumi-v3.253.0-linux-x64.tar.gz. NOT verified on the machines this project is
# developed on (they cannot reach github.com): when changing VERSION, take the value from the
# release's checksums file, https://github.com/pulumi/pulumi/releases/download/v$VERSION/pulumi-$VERSION-checksums.txt
SHA256=33161e521280e6c77395a46344dba5ff9c118a90df254801e662087143b4d1ac
TARBALL_NAME=pulumi-v$VERSION-linux-x64.tar.gz
URL=https://github.com/pulumi/pulumi/releases/download/v$VERSION/$TARBALL_NAME

root=$(cd "$(dirname "$0")/.." && pwd)
local_dir=$root/.pulumi-cli/v$VERSION

# install SOURCE SHA256 DEST: exit 2 when SOURCE cannot be read, 3 when it is not the expected
# tarball; DEST appears only when the whole tarball was verified and unpacked. Every step is
# checked by hand: callers test its status, which turns `set -e` off inside.
install() (
  source=$1 sha256=$2 dest=$3
  tmp=$(mktemp -d) || exit 2
  trap 'rm -rf "$tmp"' EXIT
  if [[ $source == *://* ]]; then
    curl -fsSL --connect-timeout 20 --max-time 600 -o "$tmp/cli.tar.gz" "$source" || exit 2
  else
    cp -- "$source" "$tmp/cli.tar.gz" || exit 2
  fi
  actual=$(sha256sum "$tmp/cli.tar.gz" | cut -d' ' -f1)
  if [ "$actual" != "$sha256" ]; then
    printf 'error: SHA-256 mismatch for %s\n  expected %s\n  got      %s\nnothing was unpacked\n' \
      "$source" "$sha256" "$actual" >&2
    exit 3
  fi
  mkdir -p "$tmp/unpacked" && tar -xzf "$tmp/cli.tar.gz" -C "$tmp/unpacked" || exit 3
  [ -x "$tmp/unpacked/pulumi/pulumi" ] || { echo "error: $source holds no pulumi/pulumi" >&2; exit 3; }
  mkdir -p "$(dirname "$dest")" && rm -rf "$dest" && mv "$tmp/unpacked/pulumi" "$dest" || exit 3
)

offline_help() {
  local found=${1:-none}
  cat >&2 <<MSG
error: could not download the Pulumi CLI v$VERSION from
  ${PULUMI_CLI_URL:-$URL}
Without network access to it, do one of:
  - fetch $TARBALL_NAME by other means, then
      PULUMI_TARBALL=/path/to/$TARBALL_NAME ./up.sh STACK
  - put pulumi v$VERSION on PATH (found: $found)
  - point PULUMI_CLI_URL at a mirror of that file
The file must have SHA-256 $SHA256.
MSG
}

ensure() {
  if [ -x "$local_dir/pulumi" ]; then
    printf '%s\n' "$local_dir"
    return
  fi
  if [ -n "${PULUMI_TARBALL:-}" ]; then
    local status=0
    install "$PULUMI_TARBALL" "$SHA256" "$local_dir" || status=$?
    case $status in
      0) ;;
      2) echo "error: cannot read PULUMI_TARBALL=$PULUMI_TARBALL" >&2; exit 1 ;;
      *) echo "error: PULUMI_TARBALL=$PULUMI_TARBALL is not $TARBALL_NAME (the Pulumi CLI v$VERSION release)" >&2; exit 1 ;;
    esac
    printf '%s\n' "$local_dir"
    return
  fi
  local found=none on_path
  if on_path=$(command -v pulumi); then
    found="$(pulumi version 2>/dev/null || echo unknown) at $on_path"
    if [ "$(pulumi version 2>/dev/null)" = "v$VERSION" ]; then
      dirname "$on_path"
      return
    fi
  fi
  echo "installing the Pulumi CLI v$VERSION into $local_dir" >&2
  local status=0
  install "${PULUMI_CLI_URL:-$URL}" "$SHA256" "$local_dir" || status=$?
  case $status in
    0) printf '%s\n' "$local_dir" ;;
    2) offline_help "$found"; exit 1 ;;
    *) exit 1 ;;
  esac
}

case "${1:-}" in
  "") ensure ;;
  install) shift; [ $# = 3 ] || { echo "usage: $0 install SOURCE SHA256 DEST" >&2; exit 64; }; install "$@" ;;
  *) echo "usage: $0 [install SOURCE SHA256 DEST]" >&2; exit 64 ;;
esac
