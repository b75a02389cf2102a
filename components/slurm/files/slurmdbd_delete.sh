# Stop slurmdbd (slurmctld, which depends on it, is gone or reconfigured already).
require CONTAINER
created_in_this_clone "$CONTAINER" || exit 0
lxc_exists "$CONTAINER" && lxc_running "$CONTAINER" || exit 0
in_ct "$CONTAINER" systemctl disable --now --quiet slurmdbd || true
in_ct "$CONTAINER" rm -f /etc/slurm/slurmdbd.conf
