#!/usr/bin/env bash
# Shared helpers, prepended to every script (components/shell.py). Parameters arrive as
# environment variables; nothing here prints a secret.
set -euo pipefail
umask 022
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export LC_ALL=C

log() { printf '%s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# require VAR...: stop early, naming the variable, when a parameter is missing.
require() {
  local var
  for var in "$@"; do
    [ -n "${!var+x}" ] || die "environment variable $var is not set"
  done
}

# lines VAR_VALUE: one list item per line, empty lines dropped (lists travel this way).
lines() { printf '%s\n' "${1-}" | sed '/^[[:space:]]*$/d'; }

# wait_until SECONDS DESCRIPTION COMMAND...: poll COMMAND every half second, fail at the deadline.
wait_until() {
  local seconds=$1 what=$2; shift 2
  local deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$deadline" ] || die "timed out after ${seconds}s waiting for $what"
    sleep 0.5
  done
}

# write_if_changed PATH MODE: stdin to PATH atomically; exit status 0 when the content changed.
write_if_changed() {
  local path=$1 mode=$2 tmp
  mkdir -p "$(dirname "$path")"
  tmp=$(mktemp "$path.XXXXXX")
  cat > "$tmp"
  chmod "$mode" "$tmp"
  if [ -f "$path" ] && cmp -s "$tmp" "$path"; then
    rm -f "$tmp"
    return 1
  fi
  mv -f "$tmp" "$path"
}

# node_lines: the NodeName= lines of a slurm.conf on stdin (what a restart, not a reconfigure, needs).
node_lines() { grep '^NodeName=' || true; }

# ---- LXC ----
lxc_dir() { printf '/var/lib/lxc/%s' "$1"; }
lxc_exists() { [ -f "$(lxc_dir "$1")/config" ]; }
lxc_owner() { cat "$(lxc_dir "$1")/gpucluster-owner" 2>/dev/null || true; }
lxc_running() { [ "$(lxc-info -n "$1" -sH 2>/dev/null)" = RUNNING ]; }

# in_ct CONTAINER COMMAND...: run a command in a container with a clean environment.
in_ct() {
  local name=$1; shift
  lxc-attach -n "$name" --clear-env \
    -v PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin -v LC_ALL=C -- "$@"
}

# ct_write_if_changed CONTAINER PATH MODE OWNER: stdin to PATH in the container;
# exit status 0 when the content changed. Paths are passed as arguments, never as shell text.
ct_write_if_changed() {
  local name=$1 path=$2 mode=$3 owner=$4
  in_ct "$name" /bin/sh -c '
    set -e; path=$1; mode=$2; owner=$3
    mkdir -p "$(dirname "$path")"
    tmp=$(mktemp "$path.XXXXXX")
    cat > "$tmp"; chown "$owner" "$tmp"; chmod "$mode" "$tmp"
    if [ -f "$path" ] && cmp -s "$tmp" "$path"; then rm -f "$tmp"; exit 1; fi
    mv -f "$tmp" "$path"' sh "$path" "$mode" "$owner"
}

systemd_ready() {
  local state
  state=$(in_ct "$1" systemctl is-system-running 2>/dev/null) || true
  [ "$state" = running ] || [ "$state" = degraded ]
}

# ct_setup_munge CONTAINER: the cluster's key (munge:munge 0400), munged on the cluster's
# socket (linked from the default path, so configless slurmd can fetch its config before it
# has read AuthInfo), started before any Slurm daemon. Exit status 0 when munge restarted.
ct_setup_munge() {
  local name=$1 changed=1 socket_dir
  require MUNGE_KEY_FILE MUNGE_SOCKET
  [ -s "$MUNGE_KEY_FILE" ] || die "munge key $MUNGE_KEY_FILE is missing (created by the munge-key resource)"
  socket_dir=$(dirname "$MUNGE_SOCKET")
  # Piped, not redirected: lxc-attach would chmod a host file given as its stdin.
  cat "$MUNGE_KEY_FILE" | ct_write_if_changed "$name" /etc/munge/munge.key 0400 munge:munge && changed=0
  printf '[Service]\nRuntimeDirectory=munge %s\nExecStart=\nExecStart=/usr/sbin/munged --socket=%s\nExecStartPost=/bin/ln -sfn %s /run/munge/munge.socket.2\n' \
    "${socket_dir#/run/}" "$MUNGE_SOCKET" "$MUNGE_SOCKET" |
    ct_write_if_changed "$name" /etc/systemd/system/munge.service.d/gpucluster.conf 0644 root:root && changed=0
  if [ "$changed" = 0 ] || ! in_ct "$name" systemctl is-active --quiet munge; then
    in_ct "$name" systemctl daemon-reload
    in_ct "$name" systemctl enable --quiet munge
    in_ct "$name" systemctl restart munge
    wait_until 30 "munge in $name" in_ct "$name" /bin/sh -c 'munge -n | unmunge'
    return 0
  fi
  return 1
}

# ---- iptables rules tagged with a comment ----
# delete_tagged_rules TAG: remove every rule carrying `--comment TAG` (our tags hold no spaces).
delete_tagged_rules() {
  local tag=$1 table rule
  command -v iptables >/dev/null || return 0
  for table in nat filter; do
    { iptables -t "$table" -S | grep -E -- "--comment \"?${tag}\"?( |$)" || true; } | while read -r rule; do
      # iptables -S quotes the comment (it holds ':'); our tags have no spaces, so drop quotes.
      read -ra words <<< "${rule//\"/}"
      words[0]=-D
      iptables -t "$table" "${words[@]}"
    done
  done
}

# ensure_rule TABLE CHAIN RULE...: append RULE unless an identical one is there.
ensure_rule() {
  local table=$1 chain=$2; shift 2
  iptables -t "$table" -C "$chain" "$@" 2>/dev/null || iptables -t "$table" -A "$chain" "$@"
}
