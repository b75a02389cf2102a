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
#       (~/.cache/gpucluster/pulumi-cli/vVERSION, or $PULUMI_CLI_CACHE/vVERSION); print that
#       directory. With the CLI: its Python language host and the pulumi-command provider, which
#       the proxy does not serve, from their unmodified sources in $PULUMI_PLUGIN_SOURCES
#       (default ../shared/third_party beside the project); the provider is then installed
#       (`pulumi plugin install --file`) into the kept cache's own PULUMI_HOME (vVERSION/home),
#       never the user's ~/.pulumi: a self-built provider under the official version number
#       must not be what another Pulumi project of the user runs. ./pulumi.sh (with this CLI)
#       and the tests' engine harness run with PULUMI_HOME set to it.
#       Also done by the plain call when the download fails, or the kept CLI lacks a piece,
#       and `go` is on PATH, unless PULUMI_CLI_BUILD=no.
#   tools/pulumi-cli.sh home
#       print that PULUMI_HOME (tools/k8s-control-plane.sh installs its provider there too).
#   tools/pulumi-cli.sh env
#       what the plain call does, then how to run that CLI, one NAME=VALUE a line: cli_dir (the
#       folder to put first on PATH) and, where it is the kept cache's build, PULUMI_HOME (its
#       own home; a release CLI runs with the user's ~/.pulumi). ./pulumi.sh and review.preview
#       run the CLI this way.
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
# The CLI's module. Its go.mod replaces the SDK with a local folder, and `go install pkg@version`
# refuses modules with replace lines: a throwaway module requires it and repeats its non-local
# replace line.
CLI_MODULE=github.com/pulumi/pulumi/pkg/v3
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

# The pieces the module proxy does not serve, built from their unmodified sources: a folder
# holding pulumi-vVERSION/ (the Python language host) and pulumi-command-vCOMMAND_VERSION/
# (the provider), as ../shared/third_party/ does beside a checkout of this project.
COMMAND_VERSION=1.2.1 # the pulumi-command package's plugin (requirements.txt)
sources=${PULUMI_PLUGIN_SOURCES:-}
for candidate in "$root/../shared/third_party" "$root/shared/third_party"; do
  if [ -z "$sources" ] && [ -d "$candidate" ]; then
    sources=$(cd "$candidate" && pwd)
  fi
done
language_source=$sources/pulumi-v$VERSION/sdk/python/cmd
command_source=$sources/pulumi-command-v$COMMAND_VERSION/provider
# The self-built pieces' own PULUMI_HOME (see `build` above): `pulumi plugin install` with it
# puts the provider into its plugins/, where only the project's wrappers and tests look.
home_dir=$cache_dir/home
plugin_dir=$home_dir/plugins/resource-command-v$COMMAND_VERSION

missing_sources() {
  local what=$1 path=$2
  cat >&2 <<MSG
error: cannot build $what: its source folder $path does not exist.
The Go module proxy does not serve it; the build takes its unmodified source from a folder
named by PULUMI_PLUGIN_SOURCES (default: ../shared/third_party beside this project, found: ${sources:-none}),
holding pulumi-v$VERSION/sdk/python/cmd/ (from github.com/pulumi/pulumi at tag v$VERSION) and
pulumi-command-v$COMMAND_VERSION/provider/ (from github.com/pulumi/pulumi-command at tag v$COMMAND_VERSION).
With internet, the release tarball has the language host and
  pulumi plugin install resource command $COMMAND_VERSION
fetches the provider (docs/pulumi-cli.md).
MSG
  exit 1
}

# go_build WHAT DIR LDFLAGS OUT PACKAGE: one Go build, its failure named.
go_build() {
  local what=$1 dir=$2 ldflags=$3 out=$4 package=$5
  (cd "$dir" && GOFLAGS=-mod=mod go build -trimpath -ldflags "$ldflags" -o "$out" "$package" >&2) || {
    echo "error: the Go build of $what failed (above); nothing was installed" >&2
    exit 1
  }
}

build_cli() {
  local tmp=$1
  mkdir -p "$tmp/cli"
  cat > "$tmp/cli/go.mod" <<MOD
module gpucluster.local/pulumi-cli

go 1.25

require $CLI_MODULE v$VERSION

replace github.com/atotto/clipboard => github.com/tgummerer/clipboard v0.0.0-20241001131231-d02d263e614e
MOD
  printf '//go:build tools\n\npackage tools\n\nimport _ "%s/cmd/pulumi"\n' "$CLI_MODULE" > "$tmp/cli/tools.go"
  (cd "$tmp/cli" && GOFLAGS=-mod=mod go mod tidy >&2) || {
    echo "error: the modules of $CLI_MODULE@v$VERSION could not be resolved (above); nothing was installed" >&2
    exit 1
  }
  go_build "$CLI_MODULE@v$VERSION" "$tmp/cli" "$VERSION_FLAG" "$tmp/out/pulumi" "$CLI_MODULE/cmd/pulumi"
  "$tmp/out/pulumi" version | grep -qx "v$VERSION" || { echo "error: the built CLI is not v$VERSION" >&2; exit 1; }
}

# The language host's go.mod replaces the SDK and pkg with folders of the whole repository:
# a copy requires them at this version from the proxy instead (its other replace line stays).
build_language_host() {
  local tmp=$1
  [ -f "$language_source/pulumi-language-python/main.go" ] || missing_sources "the Python language host" "$language_source"
  cp -r "$language_source/pulumi-language-python" "$tmp/language"
  (cd "$tmp/language" &&
    go mod edit -dropreplace=github.com/pulumi/pulumi/pkg/v3 -dropreplace=github.com/pulumi/pulumi/sdk/v3 \
      -require=github.com/pulumi/pulumi/pkg/v3@v$VERSION -require=github.com/pulumi/pulumi/sdk/v3@v$VERSION &&
    GOFLAGS=-mod=mod go mod tidy >&2) || {
    echo "error: the modules of the Python language host v$VERSION could not be resolved (above)" >&2
    exit 1
  }
  go_build "the Python language host v$VERSION" "$tmp/language" "$VERSION_FLAG" "$tmp/out/pulumi-language-python" .
  cp "$language_source/pulumi-language-python-exec" "$tmp/out/pulumi-language-python-exec" &&
    chmod 0755 "$tmp/out/pulumi-language-python-exec"
}

build_command_plugin() {
  local tmp=$1
  [ -f "$command_source/go.mod" ] || missing_sources "the pulumi-command provider v$COMMAND_VERSION" "$command_source"
  cp -r "$command_source" "$tmp/command"
  go_build "the pulumi-command provider v$COMMAND_VERSION" "$tmp/command" \
    "-X github.com/pulumi/pulumi-command/provider/pkg/version.Version=$COMMAND_VERSION" \
    "$tmp/out/pulumi-resource-command" ./cmd/pulumi-resource-command
}

# build: whatever of the three pieces the kept cache lacks, each built in a temporary folder
# and moved in whole; then the provider is installed where the CLI finds plugins.
build() (
  command -v go >/dev/null || { echo "error: building the Pulumi CLI needs Go (go: not found)" >&2; exit 1; }
  tmp=$(mktemp -d) || exit 1
  trap 'rm -rf "$tmp"' EXIT
  mkdir -p "$tmp/out" "$cache_dir"
  if [ ! -x "$cache_dir/pulumi" ]; then
    echo "building the Pulumi CLI v$VERSION from its Go modules into $cache_dir (once per machine; minutes)" >&2
    started=$(date +%s)
    build_cli "$tmp"
    mv "$tmp/out/pulumi" "$cache_dir/pulumi.new" && mv "$cache_dir/pulumi.new" "$cache_dir/pulumi"
    echo "built the CLI in $(($(date +%s) - started)) s" >&2
  fi
  if [ ! -x "$cache_dir/pulumi-language-python" ] || [ ! -x "$cache_dir/pulumi-language-python-exec" ]; then
    echo "building the Python language host v$VERSION from $language_source" >&2
    started=$(date +%s)
    build_language_host "$tmp"
    mv "$tmp/out/pulumi-language-python-exec" "$cache_dir/" &&
      mv "$tmp/out/pulumi-language-python" "$cache_dir/pulumi-language-python.new" &&
      mv "$cache_dir/pulumi-language-python.new" "$cache_dir/pulumi-language-python"
    echo "built the language host in $(($(date +%s) - started)) s" >&2
  fi
  plugin=$cache_dir/plugins/resource-command-v$COMMAND_VERSION/pulumi-resource-command
  if [ ! -x "$plugin" ]; then
    echo "building the pulumi-command provider v$COMMAND_VERSION from $command_source" >&2
    started=$(date +%s)
    build_command_plugin "$tmp"
    mkdir -p "$(dirname "$plugin")" && mv "$tmp/out/pulumi-resource-command" "$plugin.new" && mv "$plugin.new" "$plugin"
    echo "built the provider in $(($(date +%s) - started)) s" >&2
  fi
  install_command_plugin
  printf '%s\n' "$cache_dir"
)

# The built provider, into the kept cache's own PULUMI_HOME: never the user's ~/.pulumi/plugins.
install_command_plugin() {
  local plugin=$cache_dir/plugins/resource-command-v$COMMAND_VERSION/pulumi-resource-command
  [ -x "$plugin" ] || return 0
  if [ -x "$plugin_dir/pulumi-resource-command" ] && [ ! -e "$plugin_dir.partial" ]; then return 0; fi
  mkdir -p "$home_dir"
  PULUMI_HOME=$home_dir PULUMI_SKIP_UPDATE_CHECK=true "$cache_dir/pulumi" plugin install resource command \
    "$COMMAND_VERSION" --file "$plugin" >&2
}

# complete: whether the kept CLI has its language host and the provider is installed.
complete() {
  [ -x "$cache_dir/pulumi-language-python" ] && [ -x "$cache_dir/pulumi-language-python-exec" ] &&
    [ -x "$plugin_dir/pulumi-resource-command" ] && [ ! -e "$plugin_dir.partial" ]
}

ensure() {
  if [ -x "$local_dir/pulumi" ]; then
    printf '%s\n' "$local_dir"
    return
  fi
  if [ -x "$cache_dir/pulumi" ]; then
    # A CLI built before its language host and provider were: complete it where Go can.
    if ! complete && [ "${PULUMI_CLI_BUILD:-auto}" != no ] && command -v go >/dev/null; then
      build
      return
    fi
    printf '%s\n' "$cache_dir"
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

# env: the CLI's folder, and the kept cache's PULUMI_HOME where that folder is the kept build.
cli_env() {
  local dir
  dir=$(ensure)
  printf 'cli_dir=%s\n' "$dir"
  if [ "$dir" = "$cache_dir" ]; then
    printf 'PULUMI_HOME=%s\n' "$home_dir"
  fi
}

case "${1:-}" in
  "") ensure ;;
  env) cli_env ;;
  install) shift; [ $# = 3 ] || { echo "usage: $0 install SOURCE SHA256 DEST" >&2; exit 64; }; install "$@" ;;
  build) build ;;
  home) printf '%s\n' "$home_dir" ;;
  purge) rm -rf "$cache_root" && echo "removed $cache_root" ;;
  *) echo "usage: $0 [install SOURCE SHA256 DEST | build | home | env | purge]" >&2; exit 64 ;;
esac
