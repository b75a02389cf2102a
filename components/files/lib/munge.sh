# munged in a container (the cluster's munged on the host is one of its daemons, daemons.sh).
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
