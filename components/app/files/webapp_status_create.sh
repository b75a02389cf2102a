# The cluster snapshot writer, on the host: sinfo/squeue every STATUS_INTERVAL_S seconds into
# STATUS_DIR/cluster.json, which the web app's container mounts read-only. Started as a plain
# daemon; restarted when its program or arguments change. Its Slurm commands are the host's
# client ($CLUSTER_DIR/bin, lib/slurm_client.sh: until it is there, the snapshot says so), which
# attaches to the cluster's container: that takes root, so the writer runs as root (without new
# privileges). The web app's container holds no munge key.
require CLUSTER CLUSTER_DIR STATUS_DIR STATUS_INTERVAL_S STATUS_WRITER_SOURCE
program="$CLUSTER_DIR/cluster-status.py"
pidfile="$CLUSTER_DIR/cluster-status.pid"
# Root's alone, as its writer is root (the web app's container only reads it, through a
# read-only bind mount): a directory an earlier release gave to nobody is taken back, and the
# fixed temporary name that release's writer used goes (a link there is removed, not followed).
install -d -m 0755 -o root -g root "$STATUS_DIR"
rm -f "$STATUS_DIR/.cluster.json.tmp"
ours() { [ -n "$1" ] && grep -qF "$program" "/proc/$1/cmdline" 2>/dev/null; }
changed=1
printf '%s' "$STATUS_WRITER_SOURCE" | write_if_changed "$program" 0644 && changed=0
printf '%s %s %s\n' "$CLUSTER" "$STATUS_DIR" "$STATUS_INTERVAL_S" | write_if_changed "$CLUSTER_DIR/cluster-status.args" 0644 &&
  changed=0
pid=$(cat "$pidfile" 2>/dev/null || true)
if ours "$pid" && [ "$changed" = 0 ]; then
  log "cluster snapshot writer changed: restarting it"
  kill "$pid"
  wait_until 15 "the snapshot writer to stop" /bin/sh -c '! kill -0 "$1"' sh "$pid"
fi
if ! ours "$pid" || [ "$changed" = 0 ]; then
  rm -f "$STATUS_DIR/cluster.json"
  detached --background "$pidfile" "$CLUSTER_DIR/cluster-status.log" SLURM_BIN="$CLUSTER_DIR/bin" \
    setpriv --no-new-privs python3 "$program" "$CLUSTER" "$STATUS_DIR/cluster.json" "$STATUS_INTERVAL_S"
fi
# Until slurmctld answers, the snapshot says why; the page shows that.
sleep 0.5
ours "$(cat "$pidfile")" ||
  die "the snapshot writer did not start; the end of $CLUSTER_DIR/cluster-status.log: $(tail -n 5 "$CLUSTER_DIR/cluster-status.log" 2>&1)"
