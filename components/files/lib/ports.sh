# Listening TCP ports, read from the kernel's socket tables (/proc/net/tcp and tcp6), not from
# ss: a host without iproute2 (a minimal image) must not make a port check pass blind.

# tcp_listening PORT: a TCP socket of this network namespace listens on PORT (any address).
tcp_listening() {
  local tables=() table
  for table in /proc/net/tcp /proc/net/tcp6; do
    [ -r "$table" ] && tables+=("$table")
  done
  [ "${#tables[@]}" -gt 0 ] || die "cannot read /proc/net/tcp: the listening ports cannot be checked"
  # local_address is HEXADDR:HEXPORT; state 0A is LISTEN.
  awk -v port="$(printf ':%04X' "$1")" \
    'FNR > 1 && $4 == "0A" && substr($2, length($2) - 4) == port { found = 1 } END { exit !found }' "${tables[@]}"
}
