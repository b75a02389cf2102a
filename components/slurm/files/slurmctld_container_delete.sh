require CONTAINER
lxc_exists "$CONTAINER" && lxc_running "$CONTAINER" || exit 0
in_ct "$CONTAINER" systemctl disable --now --quiet slurmctld || true
in_ct "$CONTAINER" rm -f /etc/slurm/slurm.conf /etc/slurm/gres.conf
