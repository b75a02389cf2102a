# A node image of another Debian release brings another Slurm (bookworm 22.05, trixie 24.11),
# which reads the state of its two releases before only: it cannot take over a running
# cluster's queue or convert its accounting database (docs/changes.md).

# image_release_problems IMAGE NEW_DEBIAN: a line per reason the running cluster (its image
# container IMAGE) cannot move to the node image of Debian NEW_DEBIAN now; nothing when it can
# (no cluster yet, the same release, or an empty queue without accounting). ACCOUNTING_DATA
# names the database's directory on this host, when it is here; ACCOUNTING (every host of a
# cluster that keeps accounting) asks the running controller whether it keeps it in a database
# already, so every host refuses alike, not only the database's (whose refusal alone would let
# another host's image replacement tear down its nodes first).
image_release_problems() {
  require CLUSTER_DIR
  local image=$1 new=$2 running out jobs
  running=$(cut -d. -f1 "$(lxc_dir "$image")/rootfs/etc/debian_version" 2>/dev/null) || return 0
  [[ "$running" =~ ^[0-9]+$ ]] && [ "$running" != "$new" ] || return 0
  if [ "$running" -gt "$new" ]; then
    echo "image.release: the cluster runs the Slurm of Debian $running; Debian $new's older Slurm cannot read its state: keep the release, or destroy the cluster first"
    return 0
  fi
  local held= config
  if [ -n "${ACCOUNTING_DATA:-}" ] && [ -n "$(ls -A "$ACCOUNTING_DATA" 2>/dev/null)" ]; then
    held="its data in $ACCOUNTING_DATA"
  elif [ -n "${ACCOUNTING:-}" ] && [ -x "$CLUSTER_DIR/bin/scontrol" ] &&
    config=$(timeout 60 "$CLUSTER_DIR/bin/scontrol" show config 2>/dev/null) &&
    grep -Eq '^AccountingStorageType *= *accounting_storage/slurmdbd' <<< "$config"; then
    held="the running slurmctld keeps it through slurmdbd"
  fi
  [ -z "$held" ] ||
    echo "image.release: the Slurm of Debian $new cannot convert the accounting database of Debian $running's ($held; Slurm converts from its two releases before only): keep the release for this cluster, or destroy it (its dump is kept) and bring it up afresh without restore"
  [ -x "$CLUSTER_DIR/bin/squeue" ] || return 0
  if out=$(timeout 60 "$CLUSTER_DIR/bin/squeue" -h -o %i 2>/dev/null); then jobs=$(grep -c . <<< "$out" || true); else jobs="an unknown number of"; fi
  [ "$jobs" = 0 ] ||
    echo "image.release: the Slurm of Debian $new cannot take over the queue of Debian $running's ($jobs job(s) queued or running, or slurmctld did not answer): drain the nodes (scontrol update nodename=ALL state=drain reason=release), wait until squeue lists no job, then apply"
}
