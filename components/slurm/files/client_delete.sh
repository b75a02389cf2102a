require CLUSTER_DIR MUNGE_SOCKET SLURM_CONF_PATH
state="$CLUSTER_DIR/munge"
pid=$(daemon_pid "$state/munged.pid" munged "--socket=$MUNGE_SOCKET")
[ -z "$pid" ] || stop_daemon "$pid" munged
rm -rf "$state" "$(dirname "$MUNGE_SOCKET")"
rm -f "$SLURM_CONF_PATH"
# The controller's saved state goes with the cluster (the client lives as long as it does).
rm -rf "$CLUSTER_DIR/slurmctld" "$CLUSTER_DIR/health-passed"
