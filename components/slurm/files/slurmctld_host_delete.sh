require CLUSTER_DIR CONTROLLER_CONF_DIR
pid=$(host_slurmctld_pid "$CLUSTER_DIR" "$CONTROLLER_CONF_DIR/slurm.conf")
[ -z "$pid" ] || stop_daemon "$pid" slurmctld
rm -rf "$CLUSTER_DIR/slurmctld" "$CLUSTER_DIR/slurmctld.pid" "$CLUSTER_DIR/slurmctld.log" "$CONTROLLER_CONF_DIR"
