# slurmctld in its container (a node's, as the tutorial has it, or its own): munge first, then the config, then
# the daemon. A changed node list or accounting setting restarts slurmctld (Slurm 22.05 cannot
# add nodes or switch accounting plugins on a reconfigure); any other change is applied with
# `scontrol reconfigure`, which also pushes the new files to the configless nodes.
require CONTAINER SLURM_CONF_TEXT GRES_CONF_TEXT CGROUP_CONF_TEXT
report_clone "$CONTAINER"
stop_other_slurmctld "$CONTAINER"
restore_ct_slurmctld "$CONTAINER"
forwards_to_self "$(slurm_conf_text | controller_address)"
ct_setup_munge "$CONTAINER" || true
old_conf=$(in_ct "$CONTAINER" cat /etc/slurm/slurm.conf 2>/dev/null) || true
old_restart_lines=$(printf '%s\n' "$old_conf" | restart_lines)
warn_cpus_changed "$old_conf"
changed=1
slurm_conf_text | ct_write_if_changed "$CONTAINER" /etc/slurm/slurm.conf 0644 root:root && changed=0
printf '%s' "$GRES_CONF_TEXT" | ct_write_if_changed "$CONTAINER" /etc/slurm/gres.conf 0644 root:root && changed=0
printf '%s' "$CGROUP_CONF_TEXT" | ct_write_if_changed "$CONTAINER" /etc/slurm/cgroup.conf 0644 root:root && changed=0
# plugstack.conf (jobs in container images: Pyxis), served to the configless nodes with the rest;
# without containers, ours goes (a release's own is left as it is).
if [ -n "${PLUGSTACK_CONF_TEXT:-}" ]; then
  printf '%s' "$PLUGSTACK_CONF_TEXT" | ct_write_if_changed "$CONTAINER" /etc/slurm/plugstack.conf 0644 root:root && changed=0
elif [[ $(in_ct "$CONTAINER" cat /etc/slurm/plugstack.conf 2>/dev/null) == "# gpu-cluster: "* ]]; then
  in_ct "$CONTAINER" rm -f /etc/slurm/plugstack.conf && changed=0
fi
# Restarted until it runs: with job accounting, a slurmctld that starts before slurmdbd
# answers (a reboot starts every container at once) exits, and must try again. The last its
# container's OOM killer picks (in a node, after every job there); the burst programs it starts
# give their own processes the usual score back (components/burst/files/programs_create.sh).
if printf '[Unit]\nStartLimitIntervalSec=0\n[Service]\nRestart=on-failure\nRestartSec=5\nOOMScoreAdjust=-1000\n' |
  ct_write_if_changed "$CONTAINER" /etc/systemd/system/slurmctld.service.d/gpucluster.conf 0644 root:root; then
  in_ct "$CONTAINER" systemctl daemon-reload
fi
# A running slurmctld (and munged) takes the score now; the drop-in acts at its next start.
in_ct "$CONTAINER" /bin/sh -c 'for unit in slurmctld munge; do
    pid=$(systemctl show -p MainPID --value "$unit")
    [ "${pid:-0}" = 0 ] || echo -1000 2>/dev/null > "/proc/$pid/oom_score_adj" || true
  done' || true
in_ct "$CONTAINER" systemctl enable --quiet --no-reload slurmctld
if ! in_ct "$CONTAINER" systemctl is-active --quiet slurmctld; then
  in_ct "$CONTAINER" systemctl restart slurmctld
elif [ "$changed" = 0 ] && [ "$old_restart_lines" != "$(slurm_conf_text | restart_lines)" ]; then
  log "nodes or accounting changed: restarting slurmctld"
  in_ct "$CONTAINER" systemctl restart slurmctld
elif [ "$changed" = 0 ]; then
  log "configuration changed: scontrol reconfigure"
  in_ct "$CONTAINER" scontrol reconfigure
fi
ctld_up() { in_ct "$CONTAINER" scontrol ping 2>/dev/null | grep -q "is UP"; }
wait_until 60 "slurmctld in $CONTAINER" ctld_up
# Moved (from the host, or from a node): the old address answers for it while the jobs that
# started before the move run, so their end is recorded.
forward_moved_controller "$CONTAINER"
