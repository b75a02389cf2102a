# slurmctld in a node container (the tutorial's layout): munge first, then the config, then
# the daemon. A changed node list restarts slurmctld (Slurm 22.05 cannot add nodes on a
# reconfigure); any other change is applied with `scontrol reconfigure`, which also pushes
# the new files to the configless nodes.
require CONTAINER SLURM_CONF_PATH SLURM_CONF_TEXT GRES_CONF_TEXT
stop_other_slurmctld "$CONTAINER"
restore_ct_slurmctld "$CONTAINER"
ct_setup_munge "$CONTAINER" || true
old_nodes=$(in_ct "$CONTAINER" cat /etc/slurm/slurm.conf 2>/dev/null | node_lines) || true
changed=1
printf '%s' "$SLURM_CONF_TEXT" | ct_write_if_changed "$CONTAINER" /etc/slurm/slurm.conf 0644 root:root && changed=0
printf '%s' "$GRES_CONF_TEXT" | ct_write_if_changed "$CONTAINER" /etc/slurm/gres.conf 0644 root:root && changed=0
in_ct "$CONTAINER" systemctl enable --quiet --no-reload slurmctld
if ! in_ct "$CONTAINER" systemctl is-active --quiet slurmctld; then
  in_ct "$CONTAINER" systemctl restart slurmctld
elif [ "$changed" = 0 ] && [ "$old_nodes" != "$(printf '%s' "$SLURM_CONF_TEXT" | node_lines)" ]; then
  log "node list changed: restarting slurmctld"
  in_ct "$CONTAINER" systemctl restart slurmctld
elif [ "$changed" = 0 ]; then
  log "configuration changed: scontrol reconfigure"
  in_ct "$CONTAINER" scontrol reconfigure
fi
wait_until 60 "slurmctld in $CONTAINER" /bin/sh -c 'SLURM_CONF="$1" scontrol ping | grep -q "is UP"' sh "$SLURM_CONF_PATH"
