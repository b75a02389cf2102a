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

# restart_lines: the lines of a slurm.conf on stdin that a reconfigure cannot apply, so a
# change of them restarts slurmctld: the nodes (Slurm 22.05 cannot add nodes on a reconfigure)
# and the accounting storage and job accounting plugins.
restart_lines() { grep -E '^(NodeName|AccountingStorage[A-Za-z]*|JobAcctGather[A-Za-z]*)=' || true; }

# ---- LXC ----
# A host may keep the cluster's containers under an LXC path of its own (LXC_PATH, set by the
# command or the host state file): every lxc-* command then gets `-P LXC_PATH`.
lxc_dir() { printf '%s/%s' "${LXC_PATH:-/var/lib/lxc}" "$1"; }
lxc-attach() { command lxc-attach ${LXC_PATH:+-P "$LXC_PATH"} "$@"; }
lxc-copy() { command lxc-copy ${LXC_PATH:+-P "$LXC_PATH"} "$@"; }
lxc-create() { command lxc-create ${LXC_PATH:+-P "$LXC_PATH"} "$@"; }
lxc-destroy() { command lxc-destroy ${LXC_PATH:+-P "$LXC_PATH"} "$@"; }
lxc-info() { command lxc-info ${LXC_PATH:+-P "$LXC_PATH"} "$@"; }
lxc-start() { command lxc-start ${LXC_PATH:+-P "$LXC_PATH"} "$@"; }
lxc-stop() { command lxc-stop ${LXC_PATH:+-P "$LXC_PATH"} "$@"; }
lxc-wait() { command lxc-wait ${LXC_PATH:+-P "$LXC_PATH"} "$@"; }
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

# device_allow_lines DEVICES: devices cgroup allow lines (cgroup v1 and v2; LXC ignores the
# other one) for exactly these host device nodes, by their own major:minor. A device that is
# missing (optional control devices) gets none.
device_allow_lines() {
  local device number
  while read -r device; do
    [ -c "$device" ] || continue
    number=$(stat -c '%t %T' "$device" | { read -r major minor; printf '%d:%d' "0x$major" "0x$minor"; })
    printf 'lxc.cgroup.devices.allow = c %s rwm\nlxc.cgroup2.devices.allow = c %s rwm\n' "$number" "$number"
  done < <(lines "$1")
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

# Rule sets are written one rule per line, "TABLE CHAIN MATCH... -j TARGET" (no word holds a
# space), so the create scripts, the boot script and verify share one definition of each.

# nat_rules CLUSTER BRIDGE SUBNET: masquerading for a NAT bridge, its nodes' own traffic out
# and the replies to it. Nothing else is accepted into the bridge: each forward accepts its
# own port (forward_rules).
nat_rules() {
  local tag="gpucluster:$1:bridge:$2" bridge=$2 subnet=$3
  printf '%s\n' \
    "nat POSTROUTING -s $subnet ! -d $subnet -m comment --comment $tag -j MASQUERADE" \
    "filter FORWARD -i $bridge -s $subnet -m comment --comment $tag -j ACCEPT" \
    "filter FORWARD -o $bridge -d $subnet -m conntrack --ctstate RELATED,ESTABLISHED -m comment --comment $tag -j ACCEPT"
}

# forward_rules TAG HOST_PORT ADDRESS PORT [SOURCES]: DNAT for traffic from outside
# (PREROUTING) and from the host itself (OUTPUT), and a FORWARD accept of exactly the
# forwarded port to the target. SOURCES ('+'-separated CIDRs, empty: any) limit who outside
# the host is forwarded; the host itself always is.
forward_rules() {
  local tag=$1 host_port=$2 address=$3 port=$4 sources=${5:-} source
  local match="-p tcp --dport $host_port -m addrtype --dst-type LOCAL -m comment --comment $tag"
  for source in ${sources//+/ }; do
    printf '%s\n' "nat PREROUTING -s $source $match -j DNAT --to-destination $address:$port"
  done
  [ -n "$sources" ] || printf '%s\n' "nat PREROUTING $match -j DNAT --to-destination $address:$port"
  printf '%s\n' "nat OUTPUT $match -j DNAT --to-destination $address:$port"
  local accept="-d $address -p tcp --dport $port -m conntrack --ctstate DNAT -m comment --comment $tag -j ACCEPT"
  for source in ${sources//+/ }; do
    printf '%s\n' "filter FORWARD -s $source $accept"
  done
  [ -n "$sources" ] || printf '%s\n' "filter FORWARD $accept"
}

# route_rules CLUSTER BRIDGE NAT_SUBNET SUBNET VIA: another host's containers (SUBNET, routed via
# that host at VIA) and ours talk with their own addresses (no masquerading), and connections
# from there, or from that host itself (its Slurm clients), are forwarded into our NAT bridge.
route_rules() {
  local tag="gpucluster:$1:route:$4" bridge=$2 nat_subnet=$3 subnet=$4 via=$5
  printf '%s\n' \
    "nat POSTROUTING -s $nat_subnet -d $subnet -m comment --comment $tag -j RETURN" \
    "filter FORWARD -s $subnet -o $bridge -m comment --comment $tag -j ACCEPT" \
    "filter FORWARD -s $via/32 -o $bridge -m comment --comment $tag -j ACCEPT"
}

# routes_up CLUSTER BRIDGE NAT_SUBNET SUBNET,VIA...: a route to each other host's container
# subnet via that host, and its rules, inserted first (the RETURN must precede MASQUERADE).
routes_up() {
  local cluster=$1 bridge=$2 nat_subnet=$3 route subnet via line words
  shift 3
  for route in "$@"; do
    IFS=, read -r subnet via <<< "$route"
    ip route replace "$subnet" via "$via"
    while read -r line; do
      read -ra words <<< "$line"
      iptables -t "${words[0]}" -C "${words[@]:1}" 2>/dev/null ||
        iptables -t "${words[0]}" -I "${words[1]}" 1 "${words[@]:2}"
    done < <(route_rules "$cluster" "$bridge" "$nat_subnet" "$subnet" "$via")
  done
}

# route_down CLUSTER SUBNET VIA: the route and its rules gone (nothing to do when they are).
route_down() {
  ip route del "$2" via "$3" 2>/dev/null || true
  delete_tagged_rules "gpucluster:$1:route:$2"
}

# rule_present RULE_LINE: whether iptables holds exactly this rule.
rule_present() {
  local words
  read -ra words <<< "$1"
  iptables -t "${words[0]}" -C "${words[@]:1}" 2>/dev/null
}

# tagged_rule_count TAG: how many rules carry the tag, in the nat and filter tables.
tagged_rule_count() {
  (iptables -t nat -S; iptables -t filter -S) | grep -cE -- "--comment \"?$1\"?( |$)" || true
}

# rules_up TAG WHERE: exactly the rule lines on stdin carry TAG afterwards. When they are
# all there already nothing changes; otherwise the tagged ones are replaced, appended at the
# end of their chains (WHERE=append) or inserted at the top in the order given (WHERE=top).
rules_up() {
  local tag=$1 where=$2 rules line in_place=0 count i
  rules=$(cat)
  count=$(grep -c . <<< "$rules")
  while read -r line; do
    rule_present "$line" && in_place=$((in_place + 1))
  done <<< "$rules"
  [ "$in_place" = "$count" ] && [ "$(tagged_rule_count "$tag")" = "$count" ] && return 0
  delete_tagged_rules "$tag"
  if [ "$where" = top ]; then
    # Each at position 1, last first: the set ends up on top in the order given.
    for ((i = count; i >= 1; i--)); do
      read -ra words <<< "$(sed -n "${i}p" <<< "$rules")"
      iptables -t "${words[0]}" -I "${words[1]}" 1 "${words[@]:2}"
    done
  else
    while read -r line; do
      read -ra words <<< "$line"
      iptables -t "${words[0]}" -A "${words[@]:1}"
    done <<< "$rules"
  fi
}

# forward_up TAG HOST_PORT ADDRESS PORT [SOURCES]: exactly the forward's rules, on top of
# their chains; a changed target or source list replaces them (found by their tag).
forward_up() { forward_rules "$@" | rules_up "$1" top; }

# forward_shadows TAG HOST_PORT ADDRESS PORT [SOURCES]: one line per rule that comes before
# the forward's own in nat PREROUTING, nat OUTPUT or filter FORWARD and would take its
# traffic first (a DROP, REJECT, RETURN, ACCEPT before the DNAT, another DNAT...). A rule
# whose matches exclude the forward's traffic (protocol, port, destination, source,
# connection state, address type) does not shadow it; jumps to other chains are not followed.
forward_shadows() {
  local out_dev
  out_dev=$(ip -o route get "$3" 2>/dev/null | sed -n 's/.* dev \([^ ]*\).*/\1/p')
  { for chain in "nat PREROUTING" "nat OUTPUT" "filter FORWARD"; do
      read -r table name <<< "$chain"
      echo "@@ $table $name"
      iptables -t "$table" -S "$name"
    done; } | python3 -c '
import ipaddress, shlex, sys
tag, host_port, address, port, sources, out_dev = sys.argv[1:7]
host_port, port, address = int(host_port), int(port), ipaddress.ip_address(address)
sources = [ipaddress.ip_network(s) for s in sources.split("+") if s]
TERMINAL = {"nat": {"ACCEPT", "DNAT", "REDIRECT", "RETURN", "NETMAP", "DROP"},
            "filter": {"DROP", "REJECT", "RETURN"}}

def ports_hit(spec, wanted):
    for part in spec.split(","):
        low, _, high = part.partition(":")
        if int(low or 0) <= wanted <= int(high or low or 65535):
            return True
    return False

def may_match(words, forward):
    dport = port if forward else host_port
    for i, opt in enumerate(words):
        if not opt.startswith("-"):
            continue
        negate = i > 0 and words[i - 1] == "!"
        value = words[i + 1] if i + 1 < len(words) and words[i + 1][0] not in "-!" else ""
        hit = None
        if opt == "-p":
            hit = value in ("tcp", "6", "all")
        elif opt in ("--dport", "--dports", "--destination-port"):
            hit = ports_hit(value, dport)
        elif opt == "-d" and forward:
            hit = address in ipaddress.ip_network(value, strict=False)
        elif opt == "-s" and sources:
            hit = any(ipaddress.ip_network(value, strict=False).overlaps(s) for s in sources)
        elif opt == "-o" and forward and out_dev:
            hit = value == out_dev or (value.endswith("+") and out_dev.startswith(value[:-1]))
        elif opt in ("--ctstate", "--state"):
            hit = bool({"NEW", "DNAT"} & set(value.split(",")))
        elif opt == "--dst-type":
            hit = "LOCAL" in value.split(",")
        if hit is not None and hit == negate:
            return False
    return True

table = chain = None
rules = {}
for line in sys.stdin:
    if line.startswith("@@ "):
        _, table, chain = line.split()
        rules[(table, chain)] = []
    elif line.startswith("-A "):
        rules[(table, chain)].append(line.strip())
for (table, chain), lines in rules.items():
    forward = chain == "FORWARD"
    ours = [n for n, line in enumerate(lines) if tag in line and (not forward or f"--dport {port}" in line)]
    if not ours:
        continue
    for n, line in enumerate(lines[: ours[0]]):
        words = shlex.split(line)[2:]
        target = words[words.index("-j") + 1] if "-j" in words else ""
        matches = words[: words.index("-j")] if "-j" in words else words
        if target in TERMINAL[table] and may_match(matches, forward):
            print(f"{table} {chain}: rule {n + 1} ({line}) comes before the forward of host port {host_port} and takes its traffic")
' "$1" "$2" "$3" "$4" "${5:-}" "${out_dev:-}"
}

# forward_check TAG HOST_PORT ADDRESS PORT [SOURCES]: the forward works end to end. No rule
# shadows it (the chain is named), and a connection from the host through the host port
# reaches the target whenever the target answers directly.
forward_check() {
  local shadows via
  shadows=$(forward_shadows "$@")
  [ -z "$shadows" ] || die "the forward of host port $2 to $3:$4 is shadowed: $shadows"
  via=$(ip -o route get "$3" 2>/dev/null | sed -n 's/.* src \([^ ]*\).*/\1/p')
  [ -n "$via" ] || die "no route from the host to $3 (the forward's target)"
  if ! tcp_connects "$3" "$4"; then
    log "warning: nothing answers at $3:$4 yet; the forward of host port $2 is checked by its rules only"
  elif ! tcp_connects "$via" "$2"; then
    die "the forward of host port $2 to $3:$4 does not answer through the host ($via:$2) although the target does"
  fi
}

# tcp_connects ADDRESS PORT: a TCP connection opens within 5 seconds.
tcp_connects() { timeout 5 bash -c 'exec 3<>"/dev/tcp/$1/$2"' sh "$1" "$2" 2>/dev/null; }

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
# ip_forward belongs to a network namespace: a host that is a named namespace of a bigger
# machine (`ip netns`) keeps its own record.
IP_FORWARD_DIR=/var/lib/gpucluster-host/ip_forward
__netns=$(ip netns identify 2>/dev/null || true)
[ -z "$__netns" ] || IP_FORWARD_DIR+="-netns-$__netns"
unset __netns

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

# slurm_conf_text: SLURM_CONF_TEXT as slurmctld reads it; after a restored accounting database,
# with FirstJobId past the restored jobs (written by the database's create).
slurm_conf_text() {
  require CLUSTER_DIR SLURM_CONF_TEXT
  local first="$CLUSTER_DIR/accounting/first-job-id"
  printf '%s' "$SLURM_CONF_TEXT"
  if [ -s "$first" ]; then printf 'FirstJobId=%s\n' "$(cat "$first")"; fi
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
  in_ct "$name" rm -f /etc/slurm/slurm.conf /etc/slurm/gres.conf /etc/systemd/system/slurmctld.service.d/gpucluster.conf
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
  for dir in "${LXC_PATH:-/var/lib/lxc}"/*/; do
    name=$(basename "$dir")
    [ "$name" != "$keep" ] && [ "$(lxc_owner "$name")" = "$CLUSTER" ] && lxc_running "$name" || continue
    in_ct "$name" test -e /etc/slurm/slurm.conf || continue
    log "the controller moved: stopping slurmctld in $name"
    stop_ct_slurmctld "$name"
  done
}

# ---- people: the same name, uid and gid on the host and in every container ----
# A person is NAME:UID:GID:GROUP. These functions run on the host, and in a container through
# users_in_ct, which declares them into a shell there (config values travel as arguments).

# users_check SPEC...: refuse, before anything changes, a name or id that is someone else's.
users_check() {
  local spec name uid gid group found problems=()
  for spec in "$@"; do
    IFS=: read -r name uid gid group <<< "$spec"
    found=$(getent passwd "$name" | cut -d: -f3,4) || true
    [ -z "$found" ] || [ "$found" = "$uid:$gid" ] || problems+=("user $name exists with uid:gid $found, users[] says $uid:$gid")
    found=$(getent passwd "$uid" | cut -d: -f1) || true
    [ -z "$found" ] || [ "$found" = "$name" ] || problems+=("uid $uid belongs to $found, users[] gives it to $name")
    found=$(getent group "$group" | cut -d: -f3) || true
    [ -z "$found" ] || [ "$found" = "$gid" ] || problems+=("group $group exists with gid $found, users[] says $gid")
    found=$(getent group "$gid" | cut -d: -f1) || true
    [ -z "$found" ] || [ "$found" = "$group" ] || problems+=("gid $gid belongs to group $found, users[] says $group")
  done
  [ "${#problems[@]}" = 0 ] && return 0
  printf 'error: %s\n' "${problems[@]}" >&2
  return 1
}

# user_add SPEC HOME: the group and the user, each made when missing (HOME: yes makes a home
# directory). Prints `group NAME` / `user NAME` for what it made.
user_add() {
  local name uid gid group home=$2
  IFS=: read -r name uid gid group <<< "$1"
  if ! getent group "$group" >/dev/null; then
    groupadd -g "$gid" "$group"
    echo "group $group"
  fi
  if ! getent passwd "$name" >/dev/null; then
    if [ "$home" = yes ]; then
      useradd -m -u "$uid" -g "$gid" -s /bin/bash "$name"
    else
      useradd -M -d /nonexistent -u "$uid" -g "$gid" -s /usr/sbin/nologin "$name"
    fi
    echo "user $name"
  fi
}

# users_converge RECORD HOME SPEC...: exactly these people among the ones RECORD says this
# function made: missing ones are added, recorded ones no longer wanted are removed. People
# who were there before are never removed.
users_converge() {
  local record=$1 home=$2 spec kind item keep name group
  shift 2
  users_check "$@"
  mkdir -p "$(dirname "$record")"
  touch "$record"
  for spec in "$@"; do
    user_add "$spec" "$home" >> "$record"
  done
  keep=$(for spec in "$@"; do
    IFS=: read -r name _ _ group <<< "$spec"
    printf 'user %s\ngroup %s\n' "$name" "$group"
  done)
  # Users before groups: a group goes once no user has it as primary group.
  for kind in user group; do
    while read -r item; do
      grep -qxF "$kind $item" <<< "$keep" && continue
      if [ "$kind" = user ]; then
        userdel -r "$item" 2>/dev/null || userdel "$item" 2>/dev/null || true
      else
        groupdel "$item" 2>/dev/null || true
      fi
      sed -i "/^$kind $item\$/d" "$record"
    done < <(sed -n "s/^$kind //p" "$record")
  done
}

# users_in_ct CONTAINER RECORD SPEC...: users_converge inside a container (homes made there).
users_in_ct() {
  local name=$1 record=$2
  shift 2
  in_ct "$name" /bin/bash -c "set -euo pipefail; $(declare -f log die users_check user_add users_converge)"'
    users_converge "$@"' bash "$record" yes "$@"
}

# ---- people on the host, shared by every cluster on it ----
# Several clusters may name the same person: each cluster registers as a user of the person
# and of their group (HOST_PEOPLE_DIR/user-NAME/clusters/CLUSTER); a person this program
# created (…/created) goes when the last cluster naming them does. Never someone who was
# there before.
HOST_PEOPLE_DIR=/var/lib/gpucluster-host/people

# with_dir_lock DIR COMMAND...: run COMMAND holding DIR/lock (retried when DIR was removed
# while we waited, since the lock file goes with its directory).
with_dir_lock() {
  local dir=$1 fd
  shift
  while :; do
    mkdir -p "$dir"
    exec {fd}>> "$dir/lock"
    flock "$fd"
    if [ "$dir/lock" -ef "/proc/self/fd/$fd" ]; then
      "$@"
      exec {fd}>&-
      return 0
    fi
    exec {fd}>&-
  done
}

# _host_people CLUSTER SPEC...: the cluster uses exactly these people on the host.
_host_people() {
  local cluster=$1 spec kind item name group wanted=() entry
  shift
  for spec in "$@"; do
    while read -r kind item; do
      [ -z "$kind" ] || { mkdir -p "$HOST_PEOPLE_DIR/$kind-$item" && touch "$HOST_PEOPLE_DIR/$kind-$item/created"; }
    done < <(user_add "$spec" no)
    IFS=: read -r name _ _ group <<< "$spec"
    wanted+=("user-$name" "group-$group")
    for entry in "user-$name" "group-$group"; do
      mkdir -p "$HOST_PEOPLE_DIR/$entry/clusters"
      touch "$HOST_PEOPLE_DIR/$entry/clusters/$cluster"
    done
  done
  shopt -s nullglob
  for entry in "$HOST_PEOPLE_DIR"/user-* "$HOST_PEOPLE_DIR"/group-*; do
    [ -e "$entry/clusters/$cluster" ] || continue
    [[ " ${wanted[*]} " == *" $(basename "$entry") "* ]] && continue
    rm -f "$entry/clusters/$cluster"
    [ -z "$(ls -A "$entry/clusters")" ] || continue
    item=$(basename "$entry")
    if [ -e "$entry/created" ]; then
      case "$item" in
        user-*) userdel "${item#user-}" 2>/dev/null || true ;;
        group-*) groupdel "${item#group-}" 2>/dev/null || true ;;
      esac
      log "removed ${item/-/ } (made for the clusters using it; the last one left)"
    fi
    rm -rf "$entry"
  done
  shopt -u nullglob
  [ -n "$(ls -A "$HOST_PEOPLE_DIR" | grep -v '^lock$' || true)" ] || rm -rf "$HOST_PEOPLE_DIR"
  rmdir "$(dirname "$HOST_PEOPLE_DIR")" 2>/dev/null || true
}

# host_people CLUSTER SPEC...: the people on the host, under the lock of HOST_PEOPLE_DIR.
host_people() {
  [ "$#" -gt 1 ] || [ -d "$HOST_PEOPLE_DIR" ] || return 0
  with_dir_lock "$HOST_PEOPLE_DIR" _host_people "$@"
}

# The identity of a container's clone: a random id kept in its LXC directory, made on first use.
# A container replaced by a new clone of the same name has another one.
clone_id() {
  local dir file
  dir=$(lxc_dir "$1")
  file=$dir/gpucluster-clone-id
  [ -d "$dir" ] || return 1
  [ -s "$file" ] || cat /proc/sys/kernel/random/uuid > "$file"
  cat "$file"
}

# A create of something set up inside CONTAINER reports the clone it was made in (`clone=ID`).
report_clone() { echo "clone=$(clone_id "$1")"; }

# False when the command was created in another clone of CONTAINER than the one there now. The
# engine deletes the old copy of a command replaced along with its container only after the new
# copy exists, in the new clone of the same name: that delete must leave the new clone alone.
# A create of an earlier release reported nothing: then it is the same clone, as before.
created_in_this_clone() {
  local created
  created=$(printf '%s\n' "${PULUMI_COMMAND_STDOUT:-}" | sed -n 's/^clone=//p' | tail -n 1)
  [ -z "$created" ] || [ "$created" = "$(clone_id "$1" 2>/dev/null)" ]
}
