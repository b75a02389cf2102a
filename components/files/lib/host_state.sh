# the host state file (host-state.env): KEY=VALUE lines, lists space-separated
# load_host_state FILE: export its variables (read as data, never run as shell).
load_host_state() {
  local line
  [ -r "$1" ] || die "host state file $1 is missing (written by the cluster's boot-unit resource)"
  while IFS= read -r line; do
    if [[ "$line" =~ ^([A-Z_]+)=(.*)$ ]]; then export "${BASH_REMATCH[1]}=${BASH_REMATCH[2]}"; fi
  done < "$1"
}
