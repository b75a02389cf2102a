# The shared helpers are split by concern (components/files/lib/*.sh); a script gets this file
# first and then the files whose functions it calls (components/common/transport.py). Parameters
# arrive as environment variables; nothing here prints a secret.
set -euo pipefail
umask 022
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export LC_ALL=C

# The environment every long-lived process the scripts start gets (see detached).
DETACHED_ENV=(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C)

log() { printf '%s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# logged LOG CMD...: an installer's output (hundreds of lines) goes to LOG on the host, not to
# the command's stderr, which the engine keeps in its state; a failure shows its last lines.
logged() {
  local file=$1 rc=0
  shift
  mkdir -p "$(dirname "$file")"
  "$@" >> "$file" 2>&1 || rc=$?
  [ "$rc" -eq 0 ] || { tail -n 30 "$file" >&2; log "failed ($rc): $*; its whole output is in $file"; }
  return "$rc"
}

# require VAR...: stop early, naming the variable, when a parameter is missing.
require() {
  local var
  for var in "$@"; do
    [ -n "${!var+x}" ] || die "environment variable $var is not set"
  done
}

# lines VAR_VALUE: one list item per line, empty lines dropped (lists travel this way). In
# bash, not sed: the scripts call it often, and each program started costs every node's create.
lines() {
  local line
  while IFS= read -r line; do
    [[ $line =~ ^[[:space:]]*$ ]] || printf '%s\n' "$line"
  done <<< "${1-}"
}

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
  local path=$1 mode=$2 tmp dir
  # The parent directory, as dirname says it, without starting dirname.
  dir=${path%/*}
  [[ $path == */* ]] || dir=.
  mkdir -p "${dir:-/}"
  tmp=$(mktemp "$path.XXXXXX")
  cat > "$tmp"
  chmod "$mode" "$tmp"
  if [ -f "$path" ] && cmp -s "$tmp" "$path"; then
    rm -f "$tmp"
    return 1
  fi
  mv -f "$tmp" "$path"
}

# detached [--background PIDFILE LOG] [NAME=VALUE...] PROGRAM [ARG...]: start a long-lived
# process (a host daemon, an LXC monitor) that belongs to no deploy. Its environment is fixed
# (DETACHED_ENV and the NAME=VALUEs given), never the caller's: `pulumi up`'s carries a CI
# runner's RUNNER_TRACKING_ID, by which the runner kills what a job leaves behind, and the
# deploy's secrets (PULUMI_*, AWS_*), which every process of the same user could read. It gets a
# session of its own (setsid), and where systemd runs a scope of its own too, so the end of the
# deploy's process group or service leaves it running. PROGRAM is a program found on PATH, never
# a shell function. In the foreground it returns PROGRAM's status (daemons that fork: munged,
# lxc-start -d); with --background, stdin is /dev/null, output goes to LOG and PROGRAM's pid to
# PIDFILE.
detached() {
  local pidfile="" logfile="" program
  if [ "${1-}" = --background ]; then
    pidfile=$2 logfile=$3
    shift 3
  fi
  local run=(env -i "${DETACHED_ENV[@]}")
  while [[ "${1-}" =~ ^[A-Za-z_][A-Za-z0-9_]*= ]]; do
    run+=("$1")
    shift
  done
  program=$(type -P "${1:?detached: no program given}") || die "detached: $1 is no program on PATH"
  shift
  if [ -d /run/systemd/system ] && type -P systemd-run >/dev/null; then
    run+=(systemd-run --scope --quiet --collect --)
  fi
  run+=(setsid -w "$program" "$@")
  if [ -z "$pidfile" ]; then
    "${run[@]}"
    return
  fi
  # A simple command in the background: bash execs it in the forked child, and env, systemd-run
  # and setsid (not a process group leader there) exec in turn, so $! is PROGRAM's pid.
  "${run[@]}" </dev/null >>"$logfile" 2>&1 &
  echo $! > "$pidfile"
}
