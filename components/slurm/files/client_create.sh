# Slurm client access from the host: a munged of this cluster on its private socket, and
# slurm.conf in the cluster directory (use with SLURM_CONF=...). The host's own munge and
# /etc/slurm are not touched.
require CLUSTER_DIR MUNGE_KEY_FILE MUNGE_SOCKET SLURM_CONF_PATH SLURM_CONF_TEXT
printf '%s' "$SLURM_CONF_TEXT" | write_if_changed "$SLURM_CONF_PATH" 0644 || true
cluster_munged_up "$MUNGE_KEY_FILE" "$MUNGE_SOCKET" "$CLUSTER_DIR/munge"
