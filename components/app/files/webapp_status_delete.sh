# Stop the cluster snapshot writer and remove its files; succeed when they are gone.
require CLUSTER_DIR STATUS_DIR
program="$CLUSTER_DIR/cluster-status.py"
pidfile="$CLUSTER_DIR/cluster-status.pid"
pid=$(cat "$pidfile" 2>/dev/null || true)
if [ -n "$pid" ] && grep -qF "$program" "/proc/$pid/cmdline" 2>/dev/null; then
  kill "$pid"
  wait_until 15 "the snapshot writer to stop" /bin/sh -c '! kill -0 "$1"' sh "$pid"
fi
rm -rf "$STATUS_DIR"
rm -f "$program" "$pidfile" "$CLUSTER_DIR/cluster-status.args" "$CLUSTER_DIR/cluster-status.log"
