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
# Pyxis in the host's srun and sbatch (jobs in container images): plugstack.conf beside the copy
# of slurm.conf, Pyxis in the container where its image predates it; without them, ours goes.
plugstack=$(dirname "$CT_CLIENT_CONF")/plugstack.conf
if [ -n "${PLUGSTACK_CONF_TEXT:-}" ]; then
  ct_install_containers "$CONTAINER" "${IMAGE:?}"
  printf '%s' "$PLUGSTACK_CONF_TEXT" | ct_write_if_changed "$CONTAINER" "$plugstack" 0644 root:root || true
elif in_ct "$CONTAINER" grep -qs '^# gpu-cluster: ' "$plugstack"; then
  in_ct "$CONTAINER" rm -f "$plugstack"
fi
