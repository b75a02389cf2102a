require CLUSTER_DIR CONTROLLER_CONF_DIR
pidfile="$CLUSTER_DIR/slurmctld.pid"
pid=$(cat "$pidfile" 2>/dev/null || true)
if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
  kill "$pid"
  wait_until 30 "slurmctld to stop" /bin/sh -c '! kill -0 "$1"' sh "$pid"
fi
rm -rf "$CLUSTER_DIR/slurmctld" "$pidfile" "$CLUSTER_DIR/slurmctld.log" "$CONTROLLER_CONF_DIR"
