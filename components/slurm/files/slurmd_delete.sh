require CONTAINER NODE CLUSTER_DIR
created_in_this_clone "$CONTAINER" || exit 0
# The health gate's marker of this node, as earlier releases left it.
fresh="$CLUSTER_DIR/fresh-nodes"
rm -f "$fresh/$NODE"
rmdir "$fresh" 2>/dev/null || true
lxc_exists "$CONTAINER" && lxc_running "$CONTAINER" || exit 0
in_ct "$CONTAINER" systemctl disable --now --quiet slurmd gpucluster-job-files.timer || true
in_ct "$CONTAINER" rm -f /etc/default/slurmd /usr/local/sbin/gpucluster-gpu-health /etc/gpucluster/gpu-health.conf \
  /etc/slurm/gpucluster-topology.xml /var/lib/slurm/slurmd/hwloc_topo_whole.xml /usr/local/sbin/gpucluster-job-files \
  /etc/systemd/system/gpucluster-job-files.service /etc/systemd/system/gpucluster-job-files.timer \
  /etc/systemd/system/slurmd.service.d/gpucluster-oom.conf /etc/systemd/system/munge.service.d/gpucluster-oom.conf
