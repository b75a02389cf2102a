# host daemons: a pid file is trusted only while its pid is still that daemon
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
# (munged never runs with --force over a socket it does not own). A key written after the
# running munged started (a new key installed: a stack applied afresh to a running cluster)
# restarts it: munged reads its key only when it starts.
cluster_munged_up() {
  local key=$1 socket=$2 state=$3 pid
  [ -s "$key" ] || die "munge key $key is missing"
  mkdir -p "$state" "$(dirname "$socket")"
  pid=$(daemon_pid "$state/munged.pid" munged "--socket=$socket")
  if [ -n "$pid" ] && [ "$key" -nt "$state/munged.pid" ]; then
    log "the munge key changed: restarting the cluster's munged on the host"
    stop_daemon "$pid" munged
    pid=
  fi
  if [ -z "$pid" ]; then
    if [ -e "$socket" ]; then
      munge -S "$socket" -n >/dev/null 2>&1 && die "munge socket $socket is served by a process that is not this cluster's munged"
      rm -f "$socket"
    fi
    detached munged --socket="$socket" --key-file="$key" --pid-file="$state/munged.pid" \
      --seed-file="$state/munged.seed" --log-file="$state/munged.log"
  fi
  wait_until 15 "the cluster's munged on the host" /bin/sh -c 'munge -S "$1" -n | unmunge -S "$1"' sh "$socket"
}
