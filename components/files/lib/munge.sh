# munged in a container (the cluster's munged on the host is one of its daemons, daemons.sh).
# munged keeps Debian's socket; the cluster's socket path (slurm.conf's AuthInfo, the same path
# as on the host) is a link to it that systemd-tmpfiles makes at every boot. No unit drop-in,
# so no daemon-reload: a reload costs every node a tenth of a second of CPU, seconds when many
# nodes come up at once. The files go in with one attach and the daemon starts with another.

# ct_stage_munge STAGE: the cluster's key (munge:munge 0400) and the socket link's rule.
ct_stage_munge() {
  require MUNGE_KEY_FILE MUNGE_SOCKET
  [ -s "$MUNGE_KEY_FILE" ] || die "munge key $MUNGE_KEY_FILE is missing (created by the munge-key resource)"
  ct_stage "$1" /etc/munge/munge.key 0400 munge:munge < "$MUNGE_KEY_FILE"
  printf 'd %s 0755 root root -\nL+ %s - - - - /run/munge/munge.socket.2\n' "$(dirname "$MUNGE_SOCKET")" "$MUNGE_SOCKET" |
    ct_stage "$1" /etc/tmpfiles.d/gpucluster-munge.conf 0644 root:root
}

# CT_MUNGE_UP: shell run in the container with the cluster's socket path and whether the key
# changed ($1 $2): the socket link, and munged (re)started when the key changed or it is not
# running, until it answers. Prints `munge restarted` when it did.
# The drop-in that moved munged's socket before is removed, and munged restarted without it.
CT_MUNGE_UP='
  if rm /etc/systemd/system/munge.service.d/gpucluster.conf 2>/dev/null; then systemctl daemon-reload; set -- "$1" 1 "${3-}"; fi
  systemd-tmpfiles --create /etc/tmpfiles.d/gpucluster-munge.conf
  if [ "$2" = 1 ] || ! systemctl is-active --quiet munge; then
    systemctl enable --quiet --no-reload munge
    systemctl restart munge
    tries=0
    until munge -S "$1" -n 2>/dev/null | unmunge -S "$1" >/dev/null 2>&1; do
      tries=$((tries + 1))
      [ "$tries" -lt 60 ] || { echo "error: timed out after 30s waiting for munge in $(hostname)" >&2; exit 1; }
      sleep 0.5
    done
    echo "munge restarted"
  fi'

# ct_setup_munge CONTAINER: the cluster's key and munged, started before any Slurm daemon.
# Exit status 0 when munge restarted.
ct_setup_munge() {
  local name=$1 stage changed started
  stage=$(mktemp -d)
  ct_stage_munge "$stage"
  # Called as `ct_setup_munge ... || true`, where `set -e` does not act: every failure is explicit.
  changed=$(ct_install_staged "$name" "$stage") || die "could not install munge's files in $name"
  rm -rf "$stage"
  started=$(in_ct "$name" /bin/sh -c "set -e; $CT_MUNGE_UP" sh "$MUNGE_SOCKET" "$(key_changed "$changed")") ||
    die "munge in $name did not start"
  [ "$started" = "munge restarted" ]
}

# key_changed CHANGED: 1 when the paths a ct_install_staged printed hold the munge key, else 0.
key_changed() { if grep -qx /etc/munge/munge.key <<< "$1"; then echo 1; else echo 0; fi; }
