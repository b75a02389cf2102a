# slurmd in a node: munge first, then slurmd in configless mode; waits until the node serves (idle, or running jobs).
require CONTAINER NODE CONF_SERVER SLURM_CONF_PATH
ct_setup_munge "$CONTAINER" || true
changed=1
printf 'SLURMD_OPTIONS="--conf-server %s"\n' "$CONF_SERVER" |
  ct_write_if_changed "$CONTAINER" /etc/default/slurmd 0644 root:root && changed=0
in_ct "$CONTAINER" systemctl enable --quiet --no-reload slurmd
if [ "$changed" = 0 ] || ! in_ct "$CONTAINER" systemctl is-active --quiet slurmd; then
  in_ct "$CONTAINER" systemctl restart slurmd
  # The health gate checks every node that this update (re)started.
  mkdir -p "$(dirname "$SLURM_CONF_PATH")/fresh-nodes"
  touch "$(dirname "$SLURM_CONF_PATH")/fresh-nodes/$NODE"
fi
node_ready() {
  local state
  state=$(SLURM_CONF="$SLURM_CONF_PATH" sinfo -h -N -n "$NODE" -o %T 2>/dev/null | head -n1)
  case "$state" in idle | mixed | allocated | completing) return 0 ;; *) return 1 ;; esac
}
wait_until 120 "node $NODE to register" node_ready
