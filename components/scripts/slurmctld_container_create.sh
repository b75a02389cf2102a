# slurmctld in a node container (the tutorial's layout): munge first, then the config,
# then the daemon; a config change restarts slurmctld (nodes pick it up, configless).
require CONTAINER SLURM_CONF_PATH SLURM_CONF_TEXT GRES_CONF_TEXT
ct_setup_munge "$CONTAINER" || true
changed=1
printf '%s' "$SLURM_CONF_TEXT" | ct_write_if_changed "$CONTAINER" /etc/slurm/slurm.conf 0644 root:root && changed=0
printf '%s' "$GRES_CONF_TEXT" | ct_write_if_changed "$CONTAINER" /etc/slurm/gres.conf 0644 root:root && changed=0
in_ct "$CONTAINER" systemctl enable --quiet slurmctld
if [ "$changed" = 0 ] || ! in_ct "$CONTAINER" systemctl is-active --quiet slurmctld; then
  in_ct "$CONTAINER" systemctl restart slurmctld
fi
wait_until 60 "slurmctld in $CONTAINER" /bin/sh -c 'SLURM_CONF="$1" scontrol ping | grep -q "is UP"' sh "$SLURM_CONF_PATH"
