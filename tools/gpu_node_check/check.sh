#!/bin/bash
# The GPU path on a real GPU host, without the cluster: the project's driver discovery, its
# preflight, two node containers made from the project's own config lines (c000 owns
# /dev/nvidia0, c001 no GPU), the acceptance probe (ops/verify_gpu.py) and gpu_health.sh in
# them, Slurm in them (slurm_check.sh: the stack's slurm.conf, gres.conf and cgroup.conf, jobs
# through srun contained by their cgroup) and tools/gpu_overhead.py ($OVERHEAD_RUNS runs, 1
# unless set). Step two, as root on the GPU host (prepare.py first).
# Its log: $OUT/log.txt (default /tmp/gpu-node-check). Everything else it makes lies in a fresh
# `mktemp -d` ($SCRATCH: the unpacked LXC and Slurm, the container path, the rootfs, the
# wrappers, munge's and slurmctld's files),
# but the stack's shared_dir, which the commands name: it refuses to start when that exists,
# and at the end removes the scratch directory and the part of shared_dir's path it made.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
DC=$ROOT/tools/gpu_node_check
WORK=$DC/work
source "$DC/common.sh"
SHARED=$(env_of dev-c000-lxc SHARED_DIR) || exit 1
if [ -e "$SHARED" ] || [ -L "$SHARED" ]; then
  echo "error: $SHARED exists already (a cluster's shared files?): the check makes and removes it." \
    "Nothing was changed; run the check on a host without it." >&2
  exit 1
fi
# The first missing directory of shared_dir's path: what this check makes, and removes.
MADE=$SHARED
while [ ! -e "$(dirname "$MADE")" ]; do MADE=$(dirname "$MADE"); done
mkdir -p "$SHARED" || exit 1
SCRATCH=$(mktemp -d) || { rm -rf "$MADE"; exit 1; }
export SHARED SCRATCH
scratch_paths
# The unmounts come first (in_namespace.sh's mounts live in its own mount namespace anyway);
# --one-file-system: never through a mount into the host's files.
trap 'echo "removing what this check made: $SCRATCH $MADE"; rm -rf --one-file-system "$SCRATCH" "$MADE"' EXIT
export OUT=${OUT:-/tmp/gpu-node-check}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1

step facts
uname -a; cat /etc/os-release | head -2
nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
echo "cgroup fs: $(stat -fc %T /sys/fs/cgroup)"; echo "PID 1 cgroup: $(cat /proc/1/cgroup)"; echo "my cgroup: $(cat /proc/self/cgroup)"
echo "root controllers: $(cat /sys/fs/cgroup/cgroup.controllers 2>&1)"; echo "root subtree: $(cat /sys/fs/cgroup/cgroup.subtree_control 2>&1)"
ls -l /dev/nvidia* 2>&1
ldconfig -p | grep -E 'libcuda|libnvidia-(ml|ptxjit)' 2>&1
for p in nvidia-smi nvidia-container-cli python3 ip iptables ss; do printf '%s: %s\n' "$p" "$(command -v $p || echo none)"; done
file "$(command -v nvidia-smi)" 2>/dev/null || head -c 300 "$(command -v nvidia-smi)"
ls /usr/local/nvidia /usr/local/nvidia/lib64 2>&1 | head -40
ls -d /usr/local/cuda* 2>&1; ls /usr/local/cuda/lib64/libcublas.so* 2>&1 | head -3
findmnt -n -o TARGET,FSTYPE / ; findmnt -n -o TARGET,FSTYPE --target /opt 2>&1; findmnt -n -o TARGET,FSTYPE --target /usr/local/nvidia 2>&1
python3 -c 'import sys; print(sys.executable, sys.version)'

step "discovery: components/files/lib/gpu_driver.sh (gpu.driver_files empty)"
(libs gpu_driver; DRIVER_FILES=""; echo "method: $(gpu_driver_method)"; gpu_driver_mounts; echo "libcuda: $(gpu_driver_libcuda "$(gpu_driver_mounts)")") | tee "$WORK/mounts.txt"

step "preflight as is (this shell's cgroup: $(cat /proc/self/cgroup))"
runcmd dev-host-preflight
step "preflight, gpu.driver_files naming no libcuda (must refuse, naming it)"
runcmd dev-host-preflight DRIVER_FILES=/usr/local/nvidia/bin/nvidia-smi

step "LXC 5.0.2 from Debian 12's debs in $LXC_ROOT"
mkdir -p "$LXC_ROOT" "$LXCPATH" "$SCRATCH/bin" "$SCRATCH/ct"
for d in "$WORK"/debs/*.deb; do dpkg -x "$d" "$LXC_ROOT"; done
LD_LIBRARY_PATH=$LXC_ROOT/usr/lib/x86_64-linux-gnu
for t in lxc-start lxc-stop lxc-attach lxc-info lxc-ls; do
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s/usr/bin/%s -P %s "$@"\n' "$LD_LIBRARY_PATH" "$LXC_ROOT" $t "$LXCPATH" > "$SCRATCH/bin/$t"; chmod +x "$SCRATCH/bin/$t"
done
export PATH=$SCRATCH/bin:$PATH
sed -i "s#/usr/share/lxc#$LXC_ROOT/usr/share/lxc#g" "$LXC_ROOT"/usr/share/lxc/config/*.conf
lxc-start --version

step "Slurm 22.05 and munge from Debian 12's debs in $SLURM_ROOT"
slurm_unpack "$WORK/slurm-debs" || echo "error: could not unpack $WORK/slurm-debs"
# (A client reads a slurm.conf first: the stack's.)
for p in slurmctld slurmd srun; do printf '%s: %s\n' $p "$(SLURM_CONF=$WORK/slurm/slurm.conf "$SLURM_ROOT/wrap/$p" -V 2>&1)"; done
"$SLURM_ROOT/wrap/munged" --version 2>&1

# Part two runs as PID 1 of a new PID namespace, from the root cgroup (LXC's base cgroup is
# PID 1's: as on a systemd host). The preflight runs again there.
echo $$ > /sys/fs/cgroup/cgroup.procs 2>/dev/null || echo "(could not move into the root cgroup)"
step "part two: unshare --pid --fork --mount-proc, from cgroup $(cat /proc/self/cgroup)"
timeout 560 unshare --pid --fork --mount-proc bash "$DC/in_namespace.sh"
echo "part two exit $?"
step done
