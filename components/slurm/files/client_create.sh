# The cluster's Slurm client on this host, from its node image: CONTAINER (a container of the
# cluster on this host) gets the cluster's munge and a copy of slurm.conf, and $CLUSTER_DIR/bin
# wrappers that run sinfo, srun, sacctmgr... there. The host needs no Slurm or munge of its own.
require CLUSTER CLUSTER_DIR CONTAINER SLURM_CONF_TEXT
# An earlier release ran the cluster's munged on the host, and kept a slurm.conf copy there.
stop_host_munged
rm -f "$CLUSTER_DIR/slurm.conf"
ct_setup_munge "$CONTAINER" || true
printf '%s' "$SLURM_CONF_TEXT" | ct_write_if_changed "$CONTAINER" "$CT_CLIENT_CONF" 0644 root:root || true
write_slurm_wrappers "$CONTAINER"
