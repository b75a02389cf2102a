# slurmd in a node: munge first, then slurmd in configless mode; waits until the node serves (idle, or running jobs).
# Two lxc-attach calls: one writes every file, one (re)starts munge and slurmd as needed.
require CONTAINER NODE CONF_SERVER
report_clone "$CONTAINER"
stage=$(mktemp -d)
TOPOLOGY=/etc/slurm/gpucluster-topology.xml
trap 'rm -rf "$stage"' EXIT
ct_stage_munge "$stage"
# The CPU topology slurmd reads (lib/hwloc.sh): its CPU numbers are the node's own CPUs, as the
# container's cpuset has them, whichever of the host's CPUs those are.
read -r online < /sys/devices/system/cpu/online
node_cpus=$(lxc-cgroup -n "$CONTAINER" cpuset.cpus 2>/dev/null || true)
hwloc_topology_xml "$online" "${node_cpus:-$online}" | ct_stage "$stage" "$TOPOLOGY" 0644 root:root
{
  printf 'SLURMD_OPTIONS="--conf-server %s"\n' "$CONF_SERVER"
  printf 'HWLOC_XMLFILE=%s\nHWLOC_THISSYSTEM=1\n' "$TOPOLOGY"
  # slurmd loads these plugins at start only (containment, job accounting): a change restarts it.
  [ -z "${SLURMD_START_PLUGINS:-}" ] || printf '# %s\n' "$SLURMD_START_PLUGINS"
} | ct_stage "$stage" /etc/default/slurmd 0644 root:root
# The GPU health check (HealthCheckProgram) and the devices it expects, with the major:minor
# of the host's device nodes the container's are bound to.
if [ -n "${GPU_HEALTH_PROGRAM:-}" ]; then
  require GPU_HEALTH_DEVICES
  while read -r host_path container_path; do
    [ -c "$host_path" ] || die "GPU device $host_path is missing on the host"
    printf '%s %s\n' "$container_path" "$(stat -c '%Hr:%Lr' "$host_path")"
  done < <(lines "$GPU_HEALTH_DEVICES") | ct_stage "$stage" /etc/gpucluster/gpu-health.conf 0644 root:root
  printf '%s' "$GPU_HEALTH_PROGRAM" | ct_stage "$stage" /usr/local/sbin/gpucluster-gpu-health 0755 root:root
else
  ct_stage_absent "$stage" /usr/local/sbin/gpucluster-gpu-health
  ct_stage_absent "$stage" /etc/gpucluster/gpu-health.conf
fi
# The node's own daemons are the last its OOM killer picks, and what ended jobs leave in
# /dev/shm and /tmp goes (lib/node_files.sh): in the image already, unless it is older.
stage_node_file() { ct_stage "$stage" "$1" "$2" root:root; }
node_files stage_node_file
changed=$(ct_install_staged "$CONTAINER" "$stage")
slurmd_changed=0
! grep -qx -e /etc/default/slurmd -e "$TOPOLOGY" <<< "$changed" || slurmd_changed=1
units_changed=0
! grep -q '^/etc/systemd/system/' <<< "$changed" || units_changed=1
# The health gate finds a restarted slurmd by its start time (SlurmdStartTime), on any host.
# The same attach waits until the node registers, asked with the node's own sinfo (its image's
# Slurm; the config its slurmd fetched, or slurmctld's own where it runs too).
in_ct "$CONTAINER" /bin/sh -c "set -e; node=\$4; [ \"\$5\" = 0 ] || systemctl daemon-reload; $CT_MUNGE_UP"'
  systemctl enable --quiet --no-reload slurmd
  if [ "$5" != 0 ]; then
    # Units new to this node (an image older than them): the timer on, and the running daemons
    # take the score now (their drop-ins act at their next start). Where the host denies it
    # (its root without CAP_SYS_RESOURCE: a host that is a container), systemd ignores the
    # drop-in too and the scores stay as they were.
    systemctl enable --quiet --no-reload gpucluster-job-files.timer
    systemctl start gpucluster-job-files.timer
    for unit in munge slurmd; do
      pid=$(systemctl show -p MainPID --value "$unit")
      [ "${pid:-0}" = 0 ] || echo -1000 2>/dev/null > "/proc/$pid/oom_score_adj" || true
    done
  fi
  if [ "$3" = 1 ] || ! systemctl is-active --quiet slurmd; then
    rm -f /var/lib/slurm/slurmd/hwloc_topo_whole.xml  # slurmd keeps the topology it read here
    systemctl restart slurmd
  fi
  tries=0
  until state=$(sinfo -h -N -n "$node" -o %T 2>/dev/null | head -n1) &&
    case "$state" in idle | mixed | allocated | completing) true ;; *) false ;; esac; do
    tries=$((tries + 1))
    [ "$tries" -lt 240 ] || { echo "error: timed out after 120s waiting for node $node to register (${state:-no answer})" >&2; exit 1; }
    sleep 0.5
  done' sh "$MUNGE_SOCKET" "$(key_changed "$changed")" "$slurmd_changed" "$NODE" "$units_changed" >/dev/null
