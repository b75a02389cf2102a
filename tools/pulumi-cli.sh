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
#   tools/pulumi-cli.sh build
#       build the same version from its Go modules (needs `go` and a Go module proxy, no other
#       network) into a kept cache, once per machine
#       (~/.cache/gpucluster/pulumi-cli/vVERSION, or $PULUMI_CLI_CACHE/vVERSION); print that directory.
#       Also done by the plain call when the download fails and `go` is on PATH, unless
#       PULUMI_CLI_BUILD=no.
#   tools/pulumi-cli.sh purge
#       remove the kept cache of built CLIs (./purge-kept.sh --cli does the same).
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
# Built CLIs outlive clones of the project (a build takes minutes): one folder per version.
cache_root=${PULUMI_CLI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpucluster/pulumi-cli}
cache_dir=$cache_root/v$VERSION
# The modules of this version. The CLI's go.mod replaces the SDK with a local folder, and
# `go install pkg@version` refuses modules with replace lines: a throwaway module requires
# it and repeats its non-local replace line. The Python language host
# (sdk/python/cmd/pulumi-language-python/v3) is tried the same way; the module proxy may not
# serve it, and then the build says what is missing.
CLI_MODULE=github.com/pulumi/pulumi/pkg/v3
LANGUAGE_MODULE=github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3
VERSION_FLAG="-X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=v$VERSION"

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
  - with Go and a Go module proxy: tools/pulumi-cli.sh build
The file must have SHA-256 $SHA256.
MSG
}

# build: the CLI from its module into $cache_dir (atomically: the folder appears complete).
build() (
  command -v go >/dev/null || { echo "error: building the Pulumi CLI needs Go (go: not found)" >&2; exit 1; }
  if [ -x "$cache_dir/pulumi" ]; then printf '%s\n' "$cache_dir"; exit 0; fi
  echo "building the Pulumi CLI v$VERSION from its Go modules into $cache_dir (once per machine; minutes)" >&2
  tmp=$(mktemp -d) || exit 1
  trap 'rm -rf "$tmp"' EXIT
  mkdir -p "$tmp/cli" "$tmp/out"
  cat > "$tmp/cli/go.mod" <<MOD
module gpucluster.local/pulumi-cli

go 1.25

require $CLI_MODULE v$VERSION

replace github.com/atotto/clipboard => github.com/tgummerer/clipboard v0.0.0-20241001131231-d02d263e614e
MOD
  printf '//go:build tools\n\npackage tools\n\nimport _ "%s/cmd/pulumi"\n' "$CLI_MODULE" > "$tmp/cli/tools.go"
  started=$(date +%s)
  (cd "$tmp/cli" && GOFLAGS=-mod=mod go mod tidy >&2 &&
    go build -trimpath -ldflags "$VERSION_FLAG" -o "$tmp/out/pulumi" "$CLI_MODULE/cmd/pulumi" >&2) || {
    echo "error: the Go build of $CLI_MODULE@v$VERSION failed (above); nothing was installed" >&2
    exit 1
  }
  "$tmp/out/pulumi" version | grep -qx "v$VERSION" || { echo "error: the built CLI is not v$VERSION" >&2; exit 1; }
  echo "built the CLI in $(($(date +%s) - started)) s" >&2
  if (cd "$tmp/cli" && go mod download "$LANGUAGE_MODULE@v$VERSION" >/dev/null 2>&1); then
    (cd "$tmp/cli" && GOFLAGS=-mod=mod go get "$LANGUAGE_MODULE@v$VERSION" >&2 &&
      go build -trimpath -ldflags "$VERSION_FLAG" -o "$tmp/out/pulumi-language-python" "$LANGUAGE_MODULE" >&2) ||
      echo "warning: the Python language host did not build (above)" >&2
  else
    echo "note: the Go module proxy does not serve $LANGUAGE_MODULE@v$VERSION: the CLI is built" \
      "without the Python language host (pulumi-language-python and pulumi-language-python-exec," \
      "from the release tarball, go next to it in $cache_dir)" >&2
  fi
  mkdir -p "$cache_root" && rm -rf "$cache_dir.new" && mv "$tmp/out" "$cache_dir.new" &&
    rm -rf "$cache_dir" && mv "$cache_dir.new" "$cache_dir" || exit 1
  printf '%s\n' "$cache_dir"
)

ensure() {
  local dir
  for dir in "$local_dir" "$cache_dir"; do
    if [ -x "$dir/pulumi" ]; then
      printf '%s\n' "$dir"
      return
    fi
  done
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
    2)
      if [ "${PULUMI_CLI_BUILD:-auto}" != no ] && command -v go >/dev/null; then
        echo "the download is impossible from here: building the same version from its Go modules instead" >&2
        build && return
      fi
      offline_help "$found"
      exit 1
      ;;
    *) exit 1 ;;
  esac
}

case "${1:-}" in
  "") ensure ;;
  install) shift; [ $# = 3 ] || { echo "usage: $0 install SOURCE SHA256 DEST" >&2; exit 64; }; install "$@" ;;
  build) build ;;
  purge) rm -rf "$cache_root" && echo "removed $cache_root" ;;
  *) echo "usage: $0 [install SOURCE SHA256 DEST | build | purge]" >&2; exit 64 ;;
esac
