#!/usr/bin/env bash
# Shared helpers, prepended to every script (components/transport.py). Parameters arrive as
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

# A container is marked as the cluster's right after it is made. A create interrupted before
# that leaves an unmarked container; the pending marker, written before the container is
# made, says it is ours: `lxc_pending CLUSTER_DIR NAME`. Clones must also sit on our image.
lxc_pending_marker() { printf '%s/pending/%s' "$1" "$2"; }
lxc_pending() { [ -f "$(lxc_pending_marker "$1" "$2")" ] && [ -z "$(lxc_owner "$2")" ]; }

# lxc_pending_begin CLUSTER_DIR NAME: write the pending marker. The directory stays while
# containers are made (many at once): only the deletes remove it, when it is empty.
lxc_pending_begin() {
  mkdir -p "$1/pending"
  touch "$(lxc_pending_marker "$1" "$2")"
}
lxc_on_image() { grep -qsE "^lxc\.rootfs\.path *= *overlay(fs)?:$(lxc_dir "$2")/rootfs:" "$(lxc_dir "$1")/config"; }

# lxc_ours CLUSTER CLUSTER_DIR NAME [IMAGE]: the container is this cluster's: marked, or a
# half-made one this cluster was making (for a clone: an overlay of the cluster's image).
lxc_ours() {
  local cluster=$1 cluster_dir=$2 name=$3 image=${4-}
  [ "$(lxc_owner "$name")" = "$cluster" ] && return 0
  lxc_pending "$cluster_dir" "$name" || return 1
  [ -z "$image" ] || [ ! -f "$(lxc_dir "$name")/config" ] || lxc_on_image "$name" "$image"
}

# lxc_mark CLUSTER CLUSTER_DIR NAME: the owner marker, then the pending marker goes (not its
# directory: another create may be writing its marker there at this moment).
lxc_mark() {
  echo "$1" > "$(lxc_dir "$3")/gpucluster-owner"
  rm -f "$(lxc_pending_marker "$2" "$3")"
}
lxc_running() { [ "$(lxc-info -n "$1" -sH 2>/dev/null)" = RUNNING ]; }

# in_ct CONTAINER COMMAND...: run a command in a container with a clean environment. Nodes
# run systemd: systemctl skips the packages' SysV scripts (syncing them runs update-rc.d, a
# perl script, seconds of CPU when many nodes enable a unit at once).
in_ct() {
  local name=$1; shift
  lxc-attach -n "$name" --clear-env -v LC_ALL=C -v SYSTEMCTL_SKIP_SYSV=1 \
    -v PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin -- "$@"
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

# systemd_ready CONTAINER: the container's boot has finished (running, or degraded). One
# attach that waits for the end of the boot, not one every poll: with many containers booting
# at once, polling attaches take CPU from their boots. Fails while systemd is not answering yet.
systemd_ready() {
  local state
  state=$(in_ct "$1" timeout 60 systemctl is-system-running --wait 2>/dev/null) || true
  [ "$state" = running ] || [ "$state" = degraded ]
}

# ct_setup_munge CONTAINER: the cluster's key (munge:munge 0400) and munged, started before
# any Slurm daemon. munged keeps Debian's socket; the cluster's socket path (slurm.conf's
# AuthInfo, the same path as on the host) is a link to it that systemd-tmpfiles makes at every
# boot. No unit drop-in, so no daemon-reload: a reload costs every node a tenth of a second of
# CPU, seconds when many nodes come up at once. Exit status 0 when munge restarted.
ct_setup_munge() {
  local name=$1 changed=1
  require MUNGE_KEY_FILE MUNGE_SOCKET
  [ -s "$MUNGE_KEY_FILE" ] || die "munge key $MUNGE_KEY_FILE is missing (created by the munge-key resource)"
  # Piped, not redirected: lxc-attach would chmod a host file given as its stdin.
  cat "$MUNGE_KEY_FILE" | ct_write_if_changed "$name" /etc/munge/munge.key 0400 munge:munge && changed=0
  # The drop-in that moved munged's socket before: removed, and munged restarted without it.
  if in_ct "$name" rm /etc/systemd/system/munge.service.d/gpucluster.conf 2>/dev/null; then
    in_ct "$name" systemctl daemon-reload
    changed=0
  fi
  printf 'd %s 0755 root root -\nL+ %s - - - - /run/munge/munge.socket.2\n' "$(dirname "$MUNGE_SOCKET")" "$MUNGE_SOCKET" |
    ct_write_if_changed "$name" /etc/tmpfiles.d/gpucluster-munge.conf 0644 root:root || true
  in_ct "$name" systemd-tmpfiles --create /etc/tmpfiles.d/gpucluster-munge.conf
  if [ "$changed" = 0 ] || ! in_ct "$name" systemctl is-active --quiet munge; then
    in_ct "$name" systemctl enable --quiet --no-reload munge
    in_ct "$name" systemctl restart munge
    wait_until 30 "munge in $name" in_ct "$name" /bin/sh -c 'munge -S "$1" -n | unmunge -S "$1"' sh "$MUNGE_SOCKET"
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

# Rule sets are written one rule per line, "TABLE CHAIN MATCH... -j TARGET" (no word holds a
# space), so the create scripts, the boot script and verify share one definition of each.

# nat_rules CLUSTER BRIDGE SUBNET: masquerading and forwarding for a NAT bridge.
nat_rules() {
  local tag="gpucluster:$1:bridge:$2" bridge=$2 subnet=$3
  printf '%s\n' \
    "nat POSTROUTING -s $subnet ! -d $subnet -m comment --comment $tag -j MASQUERADE" \
    "filter FORWARD -i $bridge -m comment --comment $tag -j ACCEPT" \
    "filter FORWARD -o $bridge -m conntrack --ctstate RELATED,ESTABLISHED,DNAT -m comment --comment $tag -j ACCEPT"
}

# forward_rules TAG HOST_PORT ADDRESS PORT: DNAT for traffic from outside (PREROUTING) and
# from the host itself (OUTPUT), and a FORWARD accept.
forward_rules() {
  local tag=$1 host_port=$2 address=$3 port=$4
  local match="-p tcp --dport $host_port -m addrtype --dst-type LOCAL -m comment --comment $tag"
  printf '%s\n' \
    "nat PREROUTING $match -j DNAT --to-destination $address:$port" \
    "nat OUTPUT $match -j DNAT --to-destination $address:$port" \
    "filter FORWARD -p tcp -d $address --dport $port -m conntrack --ctstate DNAT -m comment --comment $tag -j ACCEPT"
}

# rule_present RULE_LINE: whether iptables holds exactly this rule.
rule_present() {
  local words
  read -ra words <<< "$1"
  iptables -t "${words[0]}" -C "${words[@]:1}" 2>/dev/null
}

# ensure_rules: every rule line on stdin is there afterwards (appended when missing).
ensure_rules() {
  local line words
  while read -r line; do
    read -ra words <<< "$line"
    ensure_rule "${words[@]}"
  done
}

# tagged_rule_count TAG: how many rules carry the tag, in the nat and filter tables.
tagged_rule_count() {
  (iptables -t nat -S; iptables -t filter -S) | grep -cE -- "--comment \"?$1\"?( |$)" || true
}

# forward_up TAG HOST_PORT ADDRESS PORT: exactly the forward's rules; a changed target
# replaces them (the old ones are found by their tag).
forward_up() {
  local rules line in_place=0
  rules=$(forward_rules "$@")
  while read -r line; do
    rule_present "$line" && in_place=$((in_place + 1))
  done <<< "$rules"
  [ "$in_place" = 3 ] && [ "$(tagged_rule_count "$1")" = 3 ] && return 0
  delete_tagged_rules "$1"
  while read -r line; do
    read -ra words <<< "$line"
    iptables -t "${words[0]}" -A "${words[@]:1}"
  done <<< "$rules"
}

# ---- bridges ----
# bridge_up CLUSTER BRIDGE ADDRESS: the bridge, marked as the cluster's by its alias, with
# exactly ADDRESS (none when empty), up.
bridge_up() {
  local owner="gpucluster:$1" bridge=$2 address=$3
  if [ -e "/sys/class/net/$bridge" ]; then
    [ "$(cat "/sys/class/net/$bridge/ifalias" 2>/dev/null)" = "$owner" ] ||
      die "interface $bridge exists and is not this cluster's"
  else
    ip link add "$bridge" type bridge
    ip link set dev "$bridge" alias "$owner"
  fi
  if [ -n "$address" ] && ! ip -4 -o addr show dev "$bridge" | grep -qw -- "$address"; then
    ip addr flush dev "$bridge"
    ip addr add "$address" dev "$bridge"
  fi
  ip link set dev "$bridge" up
}

# ---- ip_forward: one host setting shared by every cluster on the host ----
# The first cluster that turns it on records the host's value; each cluster that needs it is
# a user; the last user to leave puts the value back, whatever order clusters go in.
IP_FORWARD_DIR=/var/lib/gpucluster-host/ip_forward

# with_ip_forward_lock COMMAND...: run COMMAND holding the lock of IP_FORWARD_DIR (the lock
# file goes with its directory, so retry when it was removed while we waited).
with_ip_forward_lock() {
  local fd
  while :; do
    mkdir -p "$IP_FORWARD_DIR"
    exec {fd}>> "$IP_FORWARD_DIR/lock"
    flock "$fd"
    if [ "$IP_FORWARD_DIR/lock" -ef "/proc/self/fd/$fd" ]; then
      "$@"
      exec {fd}>&-
      return 0
    fi
    exec {fd}>&-
  done
}

_ip_forward_acquire() {
  mkdir -p "$IP_FORWARD_DIR/users"
  [ -e "$IP_FORWARD_DIR/orig" ] || cat /proc/sys/net/ipv4/ip_forward > "$IP_FORWARD_DIR/orig"
  touch "$IP_FORWARD_DIR/users/$1"
  sysctl -qw net.ipv4.ip_forward=1
}

_ip_forward_release() {
  rm -f "$IP_FORWARD_DIR/users/$1"
  [ -z "$(ls -A "$IP_FORWARD_DIR/users" 2>/dev/null)" ] || return 0
  [ ! -f "$IP_FORWARD_DIR/orig" ] || sysctl -qw "net.ipv4.ip_forward=$(cat "$IP_FORWARD_DIR/orig")"
  rm -rf "$IP_FORWARD_DIR"
  rmdir "$(dirname "$IP_FORWARD_DIR")" 2>/dev/null || true
}

ip_forward_acquire() { with_ip_forward_lock _ip_forward_acquire "$1"; }
ip_forward_release() { [ -d "$IP_FORWARD_DIR" ] || return 0; with_ip_forward_lock _ip_forward_release "$1"; }

# ---- host daemons: a pid file is trusted only while its pid is still that daemon ----
# daemon_pid PIDFILE PROGRAM ARGUMENT: the pid in PIDFILE when that process runs PROGRAM with
# ARGUMENT among its arguments; nothing otherwise (after a reboot or a crash the pid may
# belong to any other process, which must never be killed or taken for ours).
daemon_pid() {
  local pid exe program
  pid=$(cat "$1" 2>/dev/null || true)
  [[ "$pid" =~ ^[0-9]+$ ]] || return 0
  program=$(readlink -f "$(command -v "$2")")
  exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 0
  [ "$exe" = "$program" ] || [ "$exe" = "$program (deleted)" ] || return 0
  tr '\0' '\n' < "/proc/$pid/cmdline" 2>/dev/null | grep -qxF -- "$3" || return 0
  printf '%s\n' "$pid"
}

# stop_daemon PID WHAT: TERM, then wait until it is gone.
stop_daemon() {
  kill "$1" 2>/dev/null || return 0
  wait_until 30 "$2 to stop" /bin/sh -c '! kill -0 "$1"' sh "$1"
}

# cluster_munged_up KEY_FILE SOCKET STATE_DIR: the cluster's munged on its private socket. A
# socket left by a dead munged is removed; one that answers but is not our munged is refused
# (munged never runs with --force over a socket it does not own).
cluster_munged_up() {
  local key=$1 socket=$2 state=$3
  [ -s "$key" ] || die "munge key $key is missing"
  mkdir -p "$state" "$(dirname "$socket")"
  if [ -z "$(daemon_pid "$state/munged.pid" munged "--socket=$socket")" ]; then
    if [ -e "$socket" ]; then
      munge -S "$socket" -n >/dev/null 2>&1 && die "munge socket $socket is served by a process that is not this cluster's munged"
      rm -f "$socket"
    fi
    munged --socket="$socket" --key-file="$key" --pid-file="$state/munged.pid" \
      --seed-file="$state/munged.seed" --log-file="$state/munged.log"
  fi
  wait_until 15 "the cluster's munged on the host" /bin/sh -c 'munge -S "$1" -n | unmunge -S "$1"' sh "$socket"
}

# host_slurmctld_pid CLUSTER_DIR CONF: the pid of the slurmctld running with -f CONF, or nothing.
host_slurmctld_pid() { daemon_pid "$1/slurmctld.pid" slurmctld "$2"; }

# host_slurmctld_up CLUSTER_DIR CONF: slurmctld on the host with CONF, started when not running.
host_slurmctld_up() {
  install -d -o slurm -g slurm "$1/slurmctld"
  [ -n "$(host_slurmctld_pid "$1" "$2")" ] || slurmctld -f "$2"
  wait_until 60 "slurmctld on the host" /bin/sh -c 'SLURM_CONF="$1" scontrol ping | grep -q "is UP"' sh "$2"
}

# ---- the host state file (host-state.env): KEY=VALUE lines, lists space-separated ----
# load_host_state FILE: export its variables (read as data, never run as shell).
load_host_state() {
  local line
  [ -r "$1" ] || die "host state file $1 is missing (written by the cluster's boot-unit resource)"
  while IFS= read -r line; do
    if [[ "$line" =~ ^([A-Z_]+)=(.*)$ ]]; then export "${BASH_REMATCH[1]}=${BASH_REMATCH[2]}"; fi
  done < "$1"
}

# ---- the cluster's slurmctld, wherever it runs ----
# The controller's state (its job queue) is kept on the host, in $CLUSTER_DIR/slurmctld: there
# slurmctld on the host runs from it, and a slurmctld in a container saves it there when it
# stops, so a controller that moves or whose container is replaced starts from the same queue.
CT_SLURMCTLD_STATE=/var/lib/slurm/slurmctld

# stop_ct_slurmctld CONTAINER: stop slurmctld there and save its state to the host.
stop_ct_slurmctld() {
  require CLUSTER_DIR
  local name=$1 saved="$CLUSTER_DIR/slurmctld"
  in_ct "$name" systemctl disable --now --quiet slurmctld || true
  if in_ct "$name" test -e "$CT_SLURMCTLD_STATE/job_state"; then
    rm -rf "$saved.new" && mkdir -p "$saved.new"
    in_ct "$name" tar -C "$CT_SLURMCTLD_STATE" -cf - . | tar -C "$saved.new" -xf -
    chown -R slurm:slurm "$saved.new" 2>/dev/null || true
    rm -rf "$saved" && mv "$saved.new" "$saved"
  fi
  in_ct "$name" rm -f /etc/slurm/slurm.conf /etc/slurm/gres.conf
}

# restore_ct_slurmctld CONTAINER: a slurmctld about to start there for the first time takes
# the saved state (which then lives in the container only).
restore_ct_slurmctld() {
  require CLUSTER_DIR
  local name=$1 saved="$CLUSTER_DIR/slurmctld"
  [ -e "$saved/job_state" ] || return 0
  in_ct "$name" test -e "$CT_SLURMCTLD_STATE/job_state" && return 0
  log "starting slurmctld in $name from the saved queue"
  tar -C "$saved" -cf - . |
    in_ct "$name" /bin/sh -c 'set -e; mkdir -p "$1"; tar -C "$1" -xf -; chown -R slurm:slurm "$1"' sh "$CT_SLURMCTLD_STATE"
  rm -rf "$saved"
}

# stop_host_slurmctld: stop a slurmctld started on the host for this cluster (checked by
# name, so a reused pid is never killed); its state stays for the next controller.
stop_host_slurmctld() {
  require CLUSTER_DIR
  local pid
  pid=$(host_slurmctld_pid "$CLUSTER_DIR" "$CLUSTER_DIR/controller/slurm.conf")
  [ -z "$pid" ] || stop_daemon "$pid" slurmctld
  rm -rf "$CLUSTER_DIR/slurmctld.pid" "$CLUSTER_DIR/slurmctld.log" "$CLUSTER_DIR/controller"
}

# stop_other_slurmctld KEEP: the controller moved to KEEP (`host` or a container): stop this
# cluster's slurmctld everywhere else, so that two never serve one cluster.
stop_other_slurmctld() {
  require CLUSTER CLUSTER_DIR
  local keep=$1 dir name
  [ "$keep" = host ] || stop_host_slurmctld
  for dir in /var/lib/lxc/*/; do
    name=$(basename "$dir")
    [ "$name" != "$keep" ] && [ "$(lxc_owner "$name")" = "$CLUSTER" ] && lxc_running "$name" || continue
    in_ct "$name" test -e /etc/slurm/slurm.conf || continue
    log "the controller moved: stopping slurmctld in $name"
    stop_ct_slurmctld "$name"
  done
}
