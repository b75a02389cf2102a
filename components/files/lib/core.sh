# The shared helpers are split by concern (components/files/lib/*.sh); a script gets this file
# first and then the files whose functions it calls (components/common/transport.py). Parameters
# arrive as environment variables; nothing here prints a secret.
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
