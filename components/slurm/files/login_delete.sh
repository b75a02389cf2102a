# The login node's sshd and munge stopped before its container goes; the people's directories
# in shared_dir are theirs and stay. Succeeds when the container is gone.
require CONTAINER
created_in_this_clone "$CONTAINER" || exit 0
lxc_exists "$CONTAINER" && lxc_running "$CONTAINER" || exit 0
in_ct "$CONTAINER" systemctl disable --now --quiet ssh munge || true
in_ct "$CONTAINER" rm -f /etc/ssh/sshd_config.d/gpucluster.conf /etc/slurm/slurm.conf || true
