# The cluster's Slurm and GPU exporter, on the controller's host: a plain daemon, like the web
# app's snapshot writer, listening on the host's NAT bridge address only; restarted when its
# program or settings change. Its Slurm commands are the host's wrappers (lib/slurm_client.sh),
# which attach to the cluster's container: that takes root, so it runs as root (no new privileges).
# Its guard (first: nothing listens unguarded) lets only Prometheus's container reach it there.
require CLUSTER CLUSTER_DIR EXPORTER_SETTINGS EXPORTER_ADDRESS EXPORTER_PORT \
  EXPORTER_SOURCE SLURM_TEXT_SOURCE COST_SOURCE EXPORTER_GUARD
guard_up "$EXPORTER_GUARD"
dir="$CLUSTER_DIR/metrics"
program="$dir/slurm_exporter.py"
pidfile="$dir/exporter.pid"
install -d -m 0755 "$dir"
changed=1
printf '%s' "$EXPORTER_SOURCE" | write_if_changed "$program" 0644 && changed=0
printf '%s' "$SLURM_TEXT_SOURCE" | write_if_changed "$dir/slurm_text.py" 0644 && changed=0
printf '%s' "$COST_SOURCE" | write_if_changed "$dir/cost_arithmetic.py" 0644 && changed=0
printf '%s\n' "$EXPORTER_SETTINGS" | write_if_changed "$dir/exporter.json" 0644 && changed=0
pid=$(daemon_pid "$pidfile" python3 "$program")
if [ -n "$pid" ] && [ "$changed" = 0 ]; then
  log "cluster exporter changed: restarting it"
  stop_daemon "$pid" "the cluster exporter"
  pid=
fi
if [ -z "$pid" ]; then
  detached --background "$pidfile" "$dir/exporter.log" SLURM_BIN="$CLUSTER_DIR/bin" setpriv --no-new-privs python3 "$program" "$dir/exporter.json"
fi
if ! (wait_until 15 "the cluster exporter on $EXPORTER_ADDRESS:$EXPORTER_PORT" \
  curl -fsS --max-time 10 -o /dev/null "http://$EXPORTER_ADDRESS:$EXPORTER_PORT/"); then
  die "the cluster exporter did not start; the end of $dir/exporter.log: $(tail -n 5 "$dir/exporter.log" 2>&1)"
fi
