#!/bin/bash
# check.sh's second part: PID 1 of a new PID namespace started from the root cgroup (LXC
# takes PID 1's cgroup as its base, as on a systemd host), so lxc-attach finds its containers.
set -uo pipefail
ROOT=$(pwd)
WORK=$ROOT/tools/gpu_node_check/work
source tools/gpu_node_check/common.sh
# check.sh's scratch directory and the stack's shared_dir, which it made.
: "${SCRATCH:?}" "${SHARED:?}"
scratch_paths
# The containers stop and their rootfs go however this ends.
trap 'for n in dev-c000 dev-c001; do lxc-stop -n $n -k >/dev/null 2>&1; done; umount "$CT"/*/root 2>/dev/null' EXIT

step "preflight in part two (PID 1 here: $(cat /proc/1/cgroup))"
runcmd dev-host-preflight

# The driver as the node image has it: none. The rootfs is an overlay of this machine's own /
# with every driver file, the driver's directory and the CUDA toolkit hidden (whiteouts).
make_rootfs() { # NAME
  local base=$CT/$1 p
  mkdir -p $base/upper $base/work $base/root
  { awk '{ print $1 }' "$WORK/mounts.txt" | grep '^/'; ldconfig -p | grep -E 'libcuda|libnvidia' | sed 's/.* => //'
    command -v nvidia-smi; echo /usr/local/nvidia; ls -d /usr/local/cuda* 2>/dev/null; } | sort -u | while read -r p; do
    [ -e "$p" ] || [ -L "$p" ] || continue
    mkdir -p "$base/upper$(dirname "$p")" 2>/dev/null || continue  # under a directory hidden already
    mknod "$base/upper$p" c 0 0 2>/dev/null || true
  done
  mount -t overlay overlay -o "lowerdir=/,upperdir=$base/upper,workdir=$base/work" $base/root
}

make_container() { # NAME COMMAND
  local name=$1 cmd=$2 dir=$LXCPATH/$1 lxc_config devices cpuset driver_mounts
  lxc_config=$(env_of "$cmd" LXC_CONFIG); devices=$(env_of "$cmd" DEVICES); cpuset=$(env_of "$cmd" CPUSET)
  make_rootfs "$name"
  mkdir -p "$dir" "$SHARED" "$CT/$name/munge"
  (
    libs lxc_config gpu_driver
    DRIVER_FILES=""
    # As components/lxc/files/container_create.sh: driver mounts, cpuset, the config.
    driver_mounts=""
    while read -r source target; do
      [ -n "$source" ] || continue
      driver_mounts+="lxc.mount.entry = $source ${target#/} none bind,ro,optional,create=file 0 0"$'\n'
    done <<< "$(gpu_driver_mounts)"
    IFS=, read -r slot count <<< "$cpuset"
    online=(); IFS=, read -ra ranges < /sys/devices/system/cpu/online
    for range in "${ranges[@]}"; do for ((cpu = ${range%-*}; cpu <= ${range#*-}; cpu++)); do online+=("$cpu"); done; done
    cpus=$(for ((i = 0; i < count; i++)); do echo "${online[(slot + i) % ${#online[@]}]}"; done | sort -n | paste -sd,)
    {
      echo "lxc.include = $LXC_ROOT/usr/share/lxc/config/debian.common.conf"
      echo "lxc.rootfs.path = dir:$CT/$name/root"
      echo "lxc.rootfs.mount = $LXC_ROOT/usr/lib/x86_64-linux-gnu/lxc/rootfs"
      echo "lxc.init.cmd = /bin/sleep infinity"
      # The host's network: slurmd in the nodes and slurmctld meet on the loopback (no bridges
      # and no `ip` on that host; slurm_check.sh gives each node its own address and port).
      echo "lxc.net.0.type = none"
      # The project's lines, its two network groups left out (no bridges on this machine).
      printf '%s\n' "$lxc_config" | grep -v '^lxc\.net' | lxc_absent_binds_out
      printf 'lxc.cgroup.cpuset.cpus = %s\nlxc.cgroup2.cpuset.cpus = %s\n' "$cpus" "$cpus"
      device_allow_lines "$devices"
      printf '%s' "$driver_mounts"
      # Slurm and munge (slurm_check.sh): the unpacked tree at its own path, read-only, and the
      # node's own munge directory where the host's is (slurm.conf names one socket path).
      echo "lxc.mount.entry = $SLURM_ROOT ${SLURM_ROOT#/} none bind,ro,create=dir 0 0"
      echo "lxc.mount.entry = $CT/$name/munge ${SCRATCH#/}/munge none bind,create=dir 0 0"
    } > "$dir/config"
  )
  echo "--- $dir/config (project lines after the 5 of this recipe)"; cat "$dir/config"
  lxc-start -n "$name" -d -l INFO -o "$CT/$name.log" || { echo "lxc-start $name failed"; tail -30 "$CT/$name.log"; return 1; }
  sleep 1
  lxc-info -n "$name" | head -3
  in_node "$name" ldconfig
}
PROBE=$(probe)
TORCH=/opt/torch/.venv/bin/python3
TORCH_CHECK='import torch; ok = torch.cuda.is_available(); print("torch", torch.__version__, "cuda available:", ok, torch.cuda.get_device_name(0) if ok else "")'

step "node A (dev-c000: /dev/nvidia0 allowed and bound)"
make_container dev-c000 dev-c000-lxc
for c in "ls -l /dev/nvidia0 /dev/nvidiactl /dev/nvidia-uvm /dev/nvidia-modeset /usr/bin/nvidia-smi" \
         "ls /usr/lib/x86_64-linux-gnu/ | grep -E 'libcuda|libnvidia'" "nvidia-smi -L" "cat /sys/fs/cgroup/cpuset.cpus.effective" \
         "ls /usr/local/cuda/lib64/libcublas.so* 2>&1 | head -2"; do
  echo "\$ $c"; in_node dev-c000 sh -c "$c" 2>&1
done
echo "\$ torch"; in_node dev-c000 $TORCH -c "$TORCH_CHECK" 2>&1 | tail -2
echo "\$ acceptance probe (ops/verify_gpu.py PROBE) as root in the node"
in_node dev-c000 python3 -c "$PROBE" '{"gpus": ["/dev/nvidia0"], "others": [[195, 1]], "gres": 1}' 2>&1
echo "\$ gpu_health.sh (no Slurm here: sinfo absent, so the GRES part is not checked)"
in_node dev-c000 sh -c 'mkdir -p /etc/gpucluster && echo "/dev/nvidia0 195:0" > /etc/gpucluster/gpu-health.conf' 
cp "$ROOT/components/slurm/files/gpu_health.sh" "$CT/dev-c000/root/tmp/gpu_health.sh"
in_node dev-c000 env GPU_HEALTH_NODE=c000 bash /tmp/gpu_health.sh; echo "gpu_health exit $?"

step "node B (dev-c001: no GPU allowed, control devices only)"
make_container dev-c001 dev-c001-lxc
echo "\$ acceptance probe with no GPU: 195:0 made with mknod must not open"
in_node dev-c001 python3 -c "$PROBE" '{"gpus": [], "others": [[195, 0]], "gres": 0}' 2>&1
echo "\$ nvidia-smi -L"; in_node dev-c001 nvidia-smi -L 2>&1
echo "\$ torch"; in_node dev-c001 $TORCH -c "$TORCH_CHECK" 2>&1 | tail -1
in_node dev-c001 sh -c 'mkdir -p /etc/gpucluster && echo "/dev/nvidia0 195:0" > /etc/gpucluster/gpu-health.conf; mknod /dev/nvidia0 c 195 0 2>/dev/null'
cp "$ROOT/components/slurm/files/gpu_health.sh" "$CT/dev-c001/root/tmp/gpu_health.sh"
echo "\$ gpu_health.sh where the GPU is refused (must fail)"; in_node dev-c001 env GPU_HEALTH_NODE=c001 bash /tmp/gpu_health.sh; echo "gpu_health exit $?"

step "Slurm in the two nodes (tools/gpu_node_check/slurm_check.sh)"
timeout 240 bash tools/gpu_node_check/slurm_check.sh
echo "slurm check exit $?"
lxc-stop -n dev-c001 -k

echo "\$ os.cpu_count() and the affinity mask in c000"; in_node dev-c000 python3 -c 'import os; print(os.cpu_count(), len(os.sched_getaffinity(0)))'
for ((run = 1; run <= ${OVERHEAD_RUNS:-1}; run++)); do
  step "overhead run $run: tools/gpu_overhead.py dev-c000 --trials 15"
  timeout 200 python3 tools/gpu_overhead.py dev-c000 --trials 15 --json "$OUT/overhead$run.json"
  echo "overhead exit $?"
done
echo "part two done"
