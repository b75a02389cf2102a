# slurmd in a node: munge first, then slurmd in configless mode; waits until the node serves (idle, or running jobs).
require CONTAINER NODE CONF_SERVER SLURM_CONF_PATH
report_clone "$CONTAINER"
ct_setup_munge "$CONTAINER" || true
changed=1
{
  printf 'SLURMD_OPTIONS="--conf-server %s"\n' "$CONF_SERVER"
  # slurmd loads its job accounting plugin at start only: a change restarts it.
  [ -z "${JOB_ACCT_GATHER:-}" ] || printf '# JobAcctGatherType=%s\n' "$JOB_ACCT_GATHER"
} | ct_write_if_changed "$CONTAINER" /etc/default/slurmd 0644 root:root && changed=0
# The GPU health check (HealthCheckProgram) and the devices it expects, with the major:minor
# of the host's device nodes the container's are bound to.
if [ -n "${GPU_HEALTH_PROGRAM:-}" ]; then
  require GPU_HEALTH_DEVICES
  while read -r host_path container_path; do
    [ -c "$host_path" ] || die "GPU device $host_path is missing on the host"
    printf '%s %s\n' "$container_path" "$(stat -c '%Hr:%Lr' "$host_path")"
  done < <(lines "$GPU_HEALTH_DEVICES") | ct_write_if_changed "$CONTAINER" /etc/gpucluster/gpu-health.conf 0644 root:root || true
  printf '%s' "$GPU_HEALTH_PROGRAM" |
    ct_write_if_changed "$CONTAINER" /usr/local/sbin/gpucluster-gpu-health 0755 root:root || true
else
  in_ct "$CONTAINER" rm -f /usr/local/sbin/gpucluster-gpu-health /etc/gpucluster/gpu-health.conf
fi
in_ct "$CONTAINER" systemctl enable --quiet --no-reload slurmd
if [ "$changed" = 0 ] || ! in_ct "$CONTAINER" systemctl is-active --quiet slurmd; then
  in_ct "$CONTAINER" systemctl restart slurmd
fi
node_ready() {
  local state
  state=$(SLURM_CONF="$SLURM_CONF_PATH" sinfo -h -N -n "$NODE" -o %T 2>/dev/null | head -n1)
  case "$state" in idle | mixed | allocated | completing) return 0 ;; *) return 1 ;; esac
}
wait_until 120 "node $NODE to register" node_ready
