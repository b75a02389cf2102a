# host daemons: a pid file is trusted only while its pid is still that daemon
# daemon_pid PIDFILE PROGRAM ARGUMENT: the pid in PIDFILE when that process runs PROGRAM with
# ARGUMENT among its arguments; nothing otherwise (after a reboot or a crash the pid may
# belong to any other process, which must never be killed or taken for ours).
daemon_pid() {
  local pid exe program
  pid=$(cat "$1" 2>/dev/null || true)
  [[ "$pid" =~ ^[0-9]+$ ]] || return 0
  # A program the host does not have (no Slurm on it) runs nowhere here.
  program=$(command -v "$2") || return 0
  program=$(readlink -f "$program")
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

