# The host's wrappers and the container's slurm.conf copy go; the container keeps its munge
# (its Slurm daemons use it).
require CLUSTER_DIR CONTAINER
rm -rf "$CLUSTER_DIR/bin"
if lxc_exists "$CONTAINER" && lxc_running "$CONTAINER"; then in_ct "$CONTAINER" rm -f "$CT_CLIENT_CONF" "$(dirname "$CT_CLIENT_CONF")/plugstack.conf" || true; fi
stop_host_munged
rm -f "$CLUSTER_DIR/slurm.conf"
