require CONTAINER
lxc_exists "$CONTAINER" && lxc_running "$CONTAINER" || exit 0
stop_ct_slurmctld "$CONTAINER"
