#!/usr/bin/env bash
# A real Kubernetes control plane for the `k8s` stack's tests, and the pulumi-kubernetes
# provider the engine applies it with, built from their Go modules once per machine.
#
#   tools/k8s-control-plane.sh
#       print the kept directory holding etcd, kube-apiserver, kube-scheduler,
#       kube-controller-manager, kwok and kwok's stages (kwok-stages.yaml); exit 1 with what to
#       run when a piece is missing.
#   tools/k8s-control-plane.sh build
#       build whatever the kept cache lacks (needs `go` and a Go module proxy, no other
#       network) into ~/.cache/gpucluster/k8s-control-plane/vVERSIONS (or
#       $K8S_CONTROL_PLANE_CACHE/vVERSIONS), then the pulumi-kubernetes provider into
#       ~/.cache/gpucluster/pulumi-kubernetes/vVERSION and install it into the self-built
#       pieces' own PULUMI_HOME (`tools/pulumi-cli.sh home`; `pulumi plugin install resource
#       kubernetes VERSION --file`), never the user's ~/.pulumi: the tests' engine harness
#       runs with it, no other Pulumi project of the user does; print the
#       control plane's directory. Every Go build runs under `nice -n 19`. Each piece prints
#       how long it took.
#   tools/k8s-control-plane.sh plugin
#       only the provider (built if missing, then installed).
#   tools/k8s-control-plane.sh purge
#       remove both kept caches (the installed plugin stays; `tools/pulumi-cli.sh purge` removes it).
set -euo pipefail

# One pinned Kubernetes: the apiserver, scheduler and controller-manager from k8s.io/kubernetes,
# etcd at the version that Kubernetes' own go.mod requires, kwok built against the same
# k8s.io/* staging modules (v0.36.1), so the three builds share most compiled packages.
K8S_VERSION=1.36.1
ETCD_VERSION=3.6.8
KWOK_VERSION=0.8.0
# The provider plugin: the version the Python SDK pins (requirements.txt pulumi-kubernetes==).
KUBERNETES_PROVIDER_VERSION=4.25.0
# The provider module's pseudo-version at the v4.25.0 tag (the proxy serves no v4 tag of it).
KUBERNETES_PROVIDER_MODULE_VERSION=v4.0.0-20260115033456-f47bc2d6f199

root=$(cd "$(dirname "$0")/.." && pwd)
cache_base=${XDG_CACHE_HOME:-$HOME/.cache}/gpucluster
cache_root=${K8S_CONTROL_PLANE_CACHE:-$cache_base/k8s-control-plane}
cache_dir=$cache_root/v$K8S_VERSION-etcd$ETCD_VERSION-kwok$KWOK_VERSION
plugin_cache=${PULUMI_KUBERNETES_CACHE:-$cache_base/pulumi-kubernetes}/v$KUBERNETES_PROVIDER_VERSION
pulumi_home=$("$root/tools/pulumi-cli.sh" home)
plugin_dir=$pulumi_home/plugins/resource-kubernetes-v$KUBERNETES_PROVIDER_VERSION
BINARIES="etcd kube-apiserver kube-scheduler kube-controller-manager kwok kwok-stages.yaml"

# go_build DIR OUT LDFLAGS PACKAGE...: one low-priority build (the machines are small and
# shared), static (no cgo, as Kubernetes' own release builds), its failure named.
go_build() {
  local dir=$1 out=$2 ldflags=$3
  shift 3
  (cd "$dir" && CGO_ENABLED=0 GOFLAGS=-mod=mod nice -n 19 go build -trimpath -ldflags "$ldflags" -o "$out" "$@" >&2) || {
    echo "error: the Go build of $* failed (above); nothing was installed" >&2
    exit 1
  }
}

tidy() {
  local dir=$1 what=$2
  (cd "$dir" && GOFLAGS=-mod=mod nice -n 19 go mod tidy >&2) || {
    echo "error: the modules of $what could not be resolved (above); nothing was installed" >&2
    exit 1
  }
}

# k8s.io/kubernetes replaces its staging modules (k8s.io/api, apimachinery, ...) with folders
# of its repository, and `go install pkg@version` refuses modules with replace lines: a
# throwaway module requires it and replaces each staging module with its own published
# v0.MINOR.PATCH module. etcd's server module replaces its siblings the same way; Kubernetes
# already requires them all at $ETCD_VERSION, so etcd is built from the same module graph.
build_kubernetes() {
  local tmp=$1 gomod
  mkdir -p "$tmp/k8s"
  gomod=$(cd "$tmp" && go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" | sed -n 's/^\s*"GoMod": "\(.*\)",$/\1/p')
  [ -f "$gomod" ] || { echo "error: the Go module proxy did not serve k8s.io/kubernetes@v$K8S_VERSION" >&2; exit 1; }
  {
    printf 'module gpucluster.local/k8s-control-plane\n\ngo 1.26\n\n'
    printf 'require (\n\tk8s.io/kubernetes v%s\n\tgo.etcd.io/etcd/server/v3 v%s\n)\n\n' "$K8S_VERSION" "$ETCD_VERSION"
    sed -n 's#^\s*\(k8s\.io/[^ ]*\) => \./staging/src/.*#replace \1 => \1 v0.'"${K8S_VERSION#1.}"'#p' "$gomod"
  } > "$tmp/k8s/go.mod"
  grep -q '^replace k8s.io/api ' "$tmp/k8s/go.mod" || { echo "error: no staging modules found in $gomod" >&2; exit 1; }
  printf '//go:build tools\n\npackage tools\n\nimport (\n' > "$tmp/k8s/tools.go"
  for cmd in kube-apiserver kube-scheduler kube-controller-manager; do
    printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$cmd" >> "$tmp/k8s/tools.go"
  done
  printf '\t_ "go.etcd.io/etcd/server/v3"\n)\n' >> "$tmp/k8s/tools.go"
  tidy "$tmp/k8s" "k8s.io/kubernetes@v$K8S_VERSION"
  local v=k8s.io/component-base/version minor=${K8S_VERSION#*.}
  minor=${minor%%.*}
  local ldflags="-s -w -X $v.gitVersion=v$K8S_VERSION -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean -X $v.buildDate=1970-01-01T00:00:00Z"
  # One `go build` of the three commands: their shared packages compile once.
  mkdir -p "$tmp/out/k8s"
  go_build "$tmp/k8s" "$tmp/out/k8s/" "$ldflags" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kube-controller-manager
  go_build "$tmp/k8s" "$tmp/out/k8s/etcd" "-s -w" go.etcd.io/etcd/server/v3
}

build_kwok() {
  local tmp=$1
  mkdir -p "$tmp/kwok"
  printf 'module gpucluster.local/kwok\n\ngo 1.26\n\nrequire sigs.k8s.io/kwok v%s\n' "$KWOK_VERSION" > "$tmp/kwok/go.mod"
  printf '//go:build tools\n\npackage tools\n\nimport _ "sigs.k8s.io/kwok/cmd/kwok"\n' > "$tmp/kwok/tools.go"
  tidy "$tmp/kwok" "sigs.k8s.io/kwok@v$KWOK_VERSION"
  go_build "$tmp/kwok" "$tmp/out/kwok" "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=v$KWOK_VERSION" sigs.k8s.io/kwok/cmd/kwok
  # The kwok binary plays no lifecycle without Stage objects (kwokctl embeds its defaults):
  # the same stages, from the same module, as one config file: nodes ready with heartbeats,
  # pods Running and Ready, a Job's pods Succeeded, deleted pods gone.
  local dir
  dir=$(cd "$tmp/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
  for stage in node/fast/node-initialize node/heartbeat/node-heartbeat pod/fast/pod-ready pod/fast/pod-complete pod/fast/pod-delete; do
    printf -- '---\n' && cat "$dir/kustomize/stage/$stage.yaml"
  done > "$tmp/out/kwok-stages.yaml"
}

# The provider's go.mod replaces its SDK with a folder of the repository: a copy of the module
# requires the SDK at the same release from the proxy instead. The provider embeds two files
# that its `go generate` makes and the module lacks: the copy gets them, made the same way.
build_plugin_binary() {
  local tmp=$1 mod=github.com/pulumi/pulumi-kubernetes/provider/v4 src
  src=$(cd "$tmp" && go mod download -json "$mod@$KUBERNETES_PROVIDER_MODULE_VERSION" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')
  [ -d "$src" ] || { echo "error: the Go module proxy did not serve $mod@$KUBERNETES_PROVIDER_MODULE_VERSION" >&2; exit 1; }
  cp -r "$src" "$tmp/provider" && chmod -R u+w "$tmp/provider"
  (cd "$tmp/provider" &&
    go mod edit -dropreplace=github.com/pulumi/pulumi-kubernetes/sdk/v4 \
      -require=github.com/pulumi/pulumi-kubernetes/sdk/v4@v$KUBERNETES_PROVIDER_VERSION)
  # What its `go generate` (generate.go) writes: the schema with the version set, and the
  # terraform mapping, both compact.
  local cmd=$tmp/provider/cmd/pulumi-resource-kubernetes
  VERSION=$KUBERNETES_PROVIDER_VERSION python3 - "$cmd" <<'PY' || { echo "error: cannot make the provider's embedded schema" >&2; exit 1; }
import json, os, sys
cmd = sys.argv[1]
schema = json.load(open(f"{cmd}/schema.json"))
schema["version"] = os.environ["VERSION"]
json.dump(schema, open(f"{cmd}/schema-embed.json", "w"), separators=(",", ":"))
mapping = json.load(open(f"{cmd}/terraform-mapping.json"))
json.dump(mapping, open(f"{cmd}/terraform-mapping-embed.json", "w"), separators=(",", ":"))
PY
  tidy "$tmp/provider" "$mod@$KUBERNETES_PROVIDER_MODULE_VERSION"
  go_build "$tmp/provider" "$tmp/out/pulumi-resource-kubernetes" \
    "-s -w -X $mod/pkg/version.Version=$KUBERNETES_PROVIDER_VERSION" ./cmd/pulumi-resource-kubernetes
}

timed() {
  local what=$1 started
  shift
  echo "building $what (once per machine; minutes)" >&2
  started=$(date +%s)
  "$@"
  echo "built $what in $(($(date +%s) - started)) s" >&2
}

# install_piece SRC DEST: atomically, so a killed build leaves no half file under its name.
install_piece() { mv "$1" "$2.new" && mv "$2.new" "$2"; }

pulumi_cli() {
  local dir
  dir=$("$root/tools/pulumi-cli.sh") || { echo "error: the Pulumi CLI is needed to install the plugin (tools/pulumi-cli.sh build)" >&2; exit 1; }
  printf '%s/pulumi\n' "$dir"
}

plugin() (
  command -v go >/dev/null || { echo "error: building the pulumi-kubernetes provider needs Go (go: not found)" >&2; exit 1; }
  if [ ! -x "$plugin_cache/pulumi-resource-kubernetes" ]; then
    tmp=$(mktemp -d) || exit 1
    trap 'rm -rf "$tmp"' EXIT
    mkdir -p "$tmp/out" "$plugin_cache"
    timed "the pulumi-kubernetes provider v$KUBERNETES_PROVIDER_VERSION" build_plugin_binary "$tmp"
    install_piece "$tmp/out/pulumi-resource-kubernetes" "$plugin_cache/pulumi-resource-kubernetes"
  fi
  if [ ! -x "$plugin_dir/pulumi-resource-kubernetes" ] || [ -e "$plugin_dir.partial" ]; then
    mkdir -p "$pulumi_home"
    PULUMI_HOME=$pulumi_home PULUMI_SKIP_UPDATE_CHECK=true "$(pulumi_cli)" plugin install resource kubernetes \
      "$KUBERNETES_PROVIDER_VERSION" --file "$plugin_cache/pulumi-resource-kubernetes" >&2
  fi
)

build() (
  command -v go >/dev/null || { echo "error: building the control plane needs Go (go: not found)" >&2; exit 1; }
  tmp=$(mktemp -d) || exit 1
  trap 'rm -rf "$tmp"' EXIT
  mkdir -p "$tmp/out" "$cache_dir"
  if [ ! -x "$cache_dir/kube-apiserver" ] || [ ! -x "$cache_dir/kube-scheduler" ] ||
    [ ! -x "$cache_dir/kube-controller-manager" ] || [ ! -x "$cache_dir/etcd" ]; then
    timed "Kubernetes v$K8S_VERSION (apiserver, scheduler, controller-manager) and etcd v$ETCD_VERSION" \
      build_kubernetes "$tmp"
    for b in kube-apiserver kube-scheduler kube-controller-manager etcd; do
      install_piece "$tmp/out/k8s/$b" "$cache_dir/$b"
    done
  fi
  if [ ! -x "$cache_dir/kwok" ] || [ ! -f "$cache_dir/kwok-stages.yaml" ]; then
    timed "kwok v$KWOK_VERSION" build_kwok "$tmp"
    install_piece "$tmp/out/kwok-stages.yaml" "$cache_dir/kwok-stages.yaml"
    install_piece "$tmp/out/kwok" "$cache_dir/kwok"
  fi
  plugin
  printf '%s\n' "$cache_dir"
)

ensure() {
  local b missing=
  for b in $BINARIES; do
    [ -f "$cache_dir/$b" ] || missing="$missing $b"
  done
  if [ -n "$missing" ]; then
    cat >&2 <<MSG
error: the kept control plane lacks:$missing
  (looked in $cache_dir)
Build it once on this machine (Go and a Go module proxy; cold, tens of minutes on 2 cores):
  tools/k8s-control-plane.sh build
MSG
    exit 1
  fi
  printf '%s\n' "$cache_dir"
}

case "${1:-}" in
  "") ensure ;;
  build) build ;;
  plugin) plugin ;;
  versions) printf 'kubernetes=%s etcd=%s kwok=%s pulumi-kubernetes=%s\n' \
    "$K8S_VERSION" "$ETCD_VERSION" "$KWOK_VERSION" "$KUBERNETES_PROVIDER_VERSION" ;;
  purge) rm -rf "$cache_root" "$(dirname "$plugin_cache")" && echo "removed $cache_root and $(dirname "$plugin_cache")" ;;
  *) echo "usage: $0 [build | plugin | versions | purge]" >&2; exit 64 ;;
esac
