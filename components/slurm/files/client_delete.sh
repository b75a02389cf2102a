require CLUSTER_DIR MUNGE_SOCKET SLURM_CONF_PATH
state="$CLUSTER_DIR/munge"
pid=$(cat "$state/munged.pid" 2>/dev/null || true)
if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
  kill "$pid"
  wait_until 15 "munged to stop" /bin/sh -c '! kill -0 "$1"' sh "$pid"
fi
rm -rf "$state" "$(dirname "$MUNGE_SOCKET")"
rm -f "$SLURM_CONF_PATH"
