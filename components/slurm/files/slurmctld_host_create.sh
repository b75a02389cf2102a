# slurmctld on the host, with its config and state under the cluster directory (the host's
# own /etc/slurm is left alone). slurmctld serves the slurm.conf and gres.conf of its -f
# directory to the configless nodes, so they live in a directory of their own. A changed
# node list restarts it (state survives in StateSaveLocation); other changes reconfigure.
require CLUSTER_DIR CONTROLLER_CONF_DIR SLURM_CONF_TEXT GRES_CONF_TEXT
conf="$CONTROLLER_CONF_DIR/slurm.conf"
old_nodes=$(cat "$conf" 2>/dev/null | node_lines) || true
changed=1
printf '%s' "$SLURM_CONF_TEXT" | write_if_changed "$conf" 0644 && changed=0
printf '%s' "$GRES_CONF_TEXT" | write_if_changed "$CONTROLLER_CONF_DIR/gres.conf" 0644 && changed=0
install -d -o slurm -g slurm "$CLUSTER_DIR/slurmctld"
pidfile="$CLUSTER_DIR/slurmctld.pid"
pid=$(cat "$pidfile" 2>/dev/null || true)
if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
  if [ "$changed" = 0 ] && [ "$old_nodes" != "$(printf '%s' "$SLURM_CONF_TEXT" | node_lines)" ]; then
    log "node list changed: restarting slurmctld"
    kill "$pid"
    wait_until 30 "slurmctld to stop" /bin/sh -c '! kill -0 "$1"' sh "$pid"
    slurmctld -f "$conf"
  elif [ "$changed" = 0 ]; then
    log "configuration changed: scontrol reconfigure"
    SLURM_CONF="$conf" scontrol reconfigure
  fi
else
  slurmctld -f "$conf"
fi
wait_until 60 "slurmctld on the host" /bin/sh -c 'SLURM_CONF="$1" scontrol ping | grep -q "is UP"' sh "$conf"
