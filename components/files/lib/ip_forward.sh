# ip_forward: one host setting shared by every cluster on the host
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
  # A cluster of an earlier release recorded the host's value in its own directory, before it
  # turned forwarding on: that record is the host's, older than any made since.
  if [ -n "${CLUSTER_DIR:-}" ] && [ -f "$CLUSTER_DIR/ip_forward.orig" ]; then
    mv -f "$CLUSTER_DIR/ip_forward.orig" "$IP_FORWARD_DIR/orig"
  fi
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
