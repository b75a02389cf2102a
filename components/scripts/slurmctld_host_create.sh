# slurmctld on the host, with its config and state in the cluster directory (the host's own
# /etc/slurm is left alone). A config change restarts it; state survives in StateSaveLocation.
require CLUSTER_DIR SLURM_CONF_PATH SLURM_CONF_TEXT GRES_CONF_TEXT
changed=1
printf '%s' "$SLURM_CONF_TEXT" | write_if_changed "$SLURM_CONF_PATH" 0644 && changed=0
printf '%s' "$GRES_CONF_TEXT" | write_if_changed "$(dirname "$SLURM_CONF_PATH")/gres.conf" 0644 && changed=0
install -d -o slurm -g slurm "$CLUSTER_DIR/slurmctld"
pidfile="$CLUSTER_DIR/slurmctld.pid"
pid=$(cat "$pidfile" 2>/dev/null || true)
if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && [ "$changed" = 0 ]; then
  kill "$pid"
  wait_until 30 "slurmctld to stop" /bin/sh -c '! kill -0 "$1"' sh "$pid"
  pid=
fi
if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then
  slurmctld -f "$SLURM_CONF_PATH"
fi
wait_until 60 "slurmctld on the host" /bin/sh -c 'SLURM_CONF="$1" scontrol ping | grep -q "is UP"' sh "$SLURM_CONF_PATH"
