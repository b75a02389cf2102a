# slurmctld on the host, with its config and state under the cluster directory (the host's
# own /etc/slurm is left alone). slurmctld serves the slurm.conf, gres.conf and cgroup.conf of its -f
# directory to the configless nodes, so they live in a directory of their own. A changed
# node list or accounting setting restarts it (state survives in StateSaveLocation); other changes reconfigure.
require CLUSTER_DIR CONTROLLER_CONF_DIR SLURM_CONF_TEXT GRES_CONF_TEXT CGROUP_CONF_TEXT
stop_other_slurmctld host
conf="$CONTROLLER_CONF_DIR/slurm.conf"
old_conf=$(cat "$conf" 2>/dev/null) || true
old_restart_lines=$(printf '%s\n' "$old_conf" | restart_lines)
warn_cpus_changed "$old_conf"
changed=1
slurm_conf_text | write_if_changed "$conf" 0644 && changed=0
printf '%s' "$GRES_CONF_TEXT" | write_if_changed "$CONTROLLER_CONF_DIR/gres.conf" 0644 && changed=0
printf '%s' "$CGROUP_CONF_TEXT" | write_if_changed "$CONTROLLER_CONF_DIR/cgroup.conf" 0644 && changed=0
pid=$(host_slurmctld_pid "$CLUSTER_DIR" "$conf")
if [ -n "$pid" ] && [ "$changed" = 0 ]; then
  if [ "$old_restart_lines" != "$(slurm_conf_text | restart_lines)" ]; then
    log "nodes or accounting changed: restarting slurmctld"
    stop_daemon "$pid" slurmctld
  else
    log "configuration changed: scontrol reconfigure"
    SLURM_CONF="$conf" scontrol reconfigure
  fi
fi
host_slurmctld_up "$CLUSTER_DIR" "$conf"
