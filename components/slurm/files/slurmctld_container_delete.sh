require CONTAINER
created_in_this_clone "$CONTAINER" || exit 0
drop_controller_forwards
lxc_exists "$CONTAINER" && lxc_running "$CONTAINER" || exit 0
stop_ct_slurmctld "$CONTAINER"
