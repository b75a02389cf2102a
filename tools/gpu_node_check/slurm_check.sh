#!/bin/bash
# Slurm in in_namespace.sh's two node containers (both running): munged and slurmctld on this
# host with the stack's slurm.conf, gres.conf and cgroup.conf (prepare.py's work/slurm), munged
# and slurmd (configless, -N NODE) in each node, then jobs through srun: with --gres=gpu:1 the
# job sees exactly one GPU, without it none (its devices cgroup), a CUDA computation (the
# acceptance probe of ops/verify_gpu.py), the job's cgroup, and the same in a container image
# (containers_check.sh: Pyxis and Enroot). Exit status 1 on any FAIL.
# Everything it starts it stops; all it writes lies in $SCRATCH (check.sh removes it).
#
# The rendered files are used as they are but where this host must differ (sed, each below):
#   SlurmctldHost   this host's own name, on the loopback (no bridges and no `ip` here)
#   cluster dir     slurmctld's state, pid and log files under $SCRATCH/cluster
#   AuthInfo        munge's socket in $SCRATCH/munge (each node binds its own directory there)
#   SlurmUser       root: no slurm user here, and none is added to this host's /etc/passwd
#   NodeAddr        127.0.0.2 and .3 with a port each (the nodes share this host's network)
#   PluginDir       the unpacked plugins (Slurm is not in Debian's paths here)
#   cgroup.conf     + IgnoreSystemd, CgroupAutomount: no systemd in these nodes (their init
#                   is `sleep infinity`), so slurmd makes its cgroups and enables their
#                   controllers itself (22.05's keys; later releases name the second EnableControllers)
set -uo pipefail
source tools/gpu_node_check/common.sh
source tools/gpu_node_check/containers_check.sh
: "${SCRATCH:?}"
scratch_paths
SW=tools/gpu_node_check/work/slurm
ETC=$SCRATCH/slurm-etc MUNGE=$SCRATCH/munge CLUSTER=$SCRATCH/cluster
NODES=(c000 c001)
export PATH=$SLURM_ROOT/wrap:$PATH SLURM_CONF=$ETC/slurm.conf
failed=0
verdict() { echo "$1 $2"; [ "$1" = ok ] || failed=1; }
slurmd_env() { python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["slurmd"][sys.argv[2]][sys.argv[3]])' "$SW/env.json" "$@"; }
cluster_dir=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["cluster_dir"])' "$SW/env.json") || exit 1

# munged with all its files in DIR (the same path on the host and, bound, in a node).
MUNGED_ARGS="--force --socket=$MUNGE/munge.socket --key-file=$MUNGE/munge.key --pid-file=$MUNGE/munged.pid
  --log-file=$MUNGE/munged.log --seed-file=$MUNGE/munged.seed"

stop_all() {
  local n
  for n in "${NODES[@]}"; do
    in_node "dev-$n" sh -c 'for p in /run/slurmd.pid "$1/munged.pid"; do [ -s "$p" ] && kill "$(cat "$p")"; done' sh "$MUNGE" 2>/dev/null
  done
  for p in "$CLUSTER/slurmctld.pid" "$MUNGE/munged.pid"; do [ -s "$p" ] && kill "$(cat "$p")" 2>/dev/null; done
  sleep 1
}
trap stop_all EXIT
trap 'exit 143' TERM INT # (timeout's signal: the daemons are stopped then too)
logs() {
  echo "--- slurmctld.log"; tail -40 "$CLUSTER/slurmctld.log" 2>&1
  for n in "${NODES[@]}"; do echo "--- $n: slurmd.log"; in_node "dev-$n" tail -40 /var/log/slurm/slurmd.log 2>&1; done
}

step "Slurm's files: the stack's, changed where this host differs"
mkdir -p "$ETC" "$MUNGE" "$CLUSTER/slurmctld" || exit 1
me=$(uname -n | cut -d. -f1)
sed -e "s#^SlurmctldHost=.*#SlurmctldHost=$me(127.0.0.1)#" \
  -e "s#=$cluster_dir/#=$CLUSTER/#" \
  -e "s#^StateSaveLocation=.*#StateSaveLocation=$CLUSTER/slurmctld#" \
  -e "s#^SlurmctldPidFile=.*#SlurmctldPidFile=$CLUSTER/slurmctld.pid#" \
  -e "s#^SlurmctldLogFile=.*#SlurmctldLogFile=$CLUSTER/slurmctld.log#" \
  -e "s#^AuthInfo=socket=.*#AuthInfo=socket=$MUNGE/munge.socket#" \
  -e "s#^SlurmUser=.*#SlurmUser=root#" \
  -e "s#^\(NodeName=c000\) NodeAddr=[^ ]*#\1 NodeAddr=127.0.0.2 Port=6818#" \
  -e "s#^\(NodeName=c001\) NodeAddr=[^ ]*#\1 NodeAddr=127.0.0.3 Port=6819#" \
  "$SW/slurm.conf" > "$ETC/slurm.conf"
echo "PluginDir=$SLURM_ROOT/usr/lib/x86_64-linux-gnu/slurm-wlm" >> "$ETC/slurm.conf"
cp "$SW/gres.conf" "$ETC/gres.conf"
{ cat "$SW/cgroup.conf"; printf 'IgnoreSystemd=yes\nCgroupAutomount=yes\n'; } > "$ETC/cgroup.conf"
echo "--- diff of slurm.conf (the stack's, this host's)"; diff "$SW/slurm.conf" "$ETC/slurm.conf"
echo "--- cgroup.conf"; cat "$ETC/cgroup.conf"; echo "--- gres.conf"; cat "$ETC/gres.conf"
grep -q '^ProctrackType=proctrack/cgroup' "$ETC/slurm.conf" && grep -q '^ConstrainDevices=yes' "$ETC/cgroup.conf" ||
  verdict FAIL "the stack's files lack the containment lines"

step "Enroot and Pyxis in the nodes (containers_check.sh)"
containers_install

step "munged and slurmctld on this host"
dd if=/dev/urandom of="$MUNGE/munge.key" bs=1024 count=1 status=none && chmod 0400 "$MUNGE/munge.key"
# shellcheck disable=SC2086 # the options are words
munged $MUNGED_ARGS || { verdict FAIL "munged did not start"; tail "$MUNGE/munged.log"; exit 1; }
munge -S "$MUNGE/munge.socket" -n | unmunge -S "$MUNGE/munge.socket" | head -3
slurmctld -f "$ETC/slurm.conf" || { verdict FAIL "slurmctld did not start"; logs; exit 1; }

step "munged and slurmd in the nodes (cgroup $(stat -fc %T /sys/fs/cgroup))"
start=$SECONDS
for n in "${NODES[@]}"; do
  ct=$(slurmd_env "$n" CONTAINER) || exit 1
  cp -p "$MUNGE/munge.key" "$CT/$ct/munge/munge.key"
  # As systemd would have it, which these nodes lack: init in init.scope, munged and slurmd
  # each in a cgroup of system.slice, the controllers enabled above them (cgroup v2 forbids
  # them where processes are). Nothing of this on cgroup v1.
  # shellcheck disable=SC2016 # expanded in the node
  in_node "$ct" sh -c '
    mkdir -p /run/munge /var/log/slurm /var/lib/slurm/slurmd && ln -sf "$1/munge.socket" /run/munge/munge.socket.2
    cg=/sys/fs/cgroup
    if [ -e $cg/cgroup.controllers ]; then
      mkdir -p $cg/init.scope $cg/system.slice/munge.service $cg/system.slice/slurmd.service
      for p in $(cat $cg/cgroup.procs); do echo "$p" > $cg/init.scope/cgroup.procs; done
      for c in $(cat $cg/cgroup.controllers); do
        echo "+$c" > $cg/cgroup.subtree_control; echo "+$c" > $cg/system.slice/cgroup.subtree_control
      done
      echo "controllers: $(cat $cg/system.slice/cgroup.subtree_control)"
    fi' sh "$MUNGE"
  # shellcheck disable=SC2016,SC2086 # expanded in the node; the options are words
  in_node "$ct" sh -c 'c=/sys/fs/cgroup/system.slice/munge.service/cgroup.procs; [ ! -e $c ] || echo $$ > $c; exec "$@"' \
    sh "$SLURM_ROOT/wrap/munged" $MUNGED_ARGS || verdict FAIL "munged did not start in $n"
  # slurmd's CPU topology, the node's own CPUs its package, as slurmd_create.sh writes it
  # (components/files/lib/hwloc.sh): c001's cpuset is not the host's first CPUs.
  cpus=$(sed -n 's/^lxc\.cgroup2\.cpuset\.cpus = //p' "$LXCPATH/$ct/config" | head -n1)
  (libs hwloc && hwloc_topology_xml "$(cat /sys/devices/system/cpu/online)" "${cpus:-$(cat /sys/devices/system/cpu/online)}") \
    > "$CT/$ct/munge/topology.xml"
  # shellcheck disable=SC2016 # expanded in the node
  in_node "$ct" env HWLOC_XMLFILE="$MUNGE/topology.xml" HWLOC_THISSYSTEM=1 \
    sh -c 'c=/sys/fs/cgroup/system.slice/slurmd.service/cgroup.procs; [ ! -e $c ] || echo $$ > $c; exec "$@"' \
    sh "$SLURM_ROOT/wrap/slurmd" -N "$n" --conf-server 127.0.0.1:6817 -d "$SLURM_ROOT/wrap/slurmstepd" ||
    verdict FAIL "slurmd did not start in $n"
done
states=""
until [ "$states" = "c000 idle c001 idle" ] || [ "$SECONDS" -gt $((start + 90)) ]; do
  kill -0 "$(cat "$CLUSTER/slurmctld.pid" 2>/dev/null)" 2>/dev/null || { states="(slurmctld is not running)"; break; }
  sleep 2
  states=$(timeout 15 sinfo -h -N -o '%N %T' 2>&1 | sort -u | paste -sd' ')
done
if [ "$states" = "c000 idle c001 idle" ]; then verdict ok "both nodes idle: $states"; else
  verdict FAIL "the nodes did not come up idle: $states"; scontrol show node 2>&1 | grep -E 'NodeName|State|Reason'; logs; exit 1
fi

step "jobs through srun"
run_job() { # SRUN_ARGS...: the job's output; its command line first (an argument of many lines: its size)
  local a shown=()
  for a; do [[ $a == *$'\n'* ]] && a="<${#a} characters>"; shown+=("$a"); done
  echo "\$ srun ${shown[*]}"
  timeout 90 srun --quiet "$@" 2>&1
}
out=$(run_job -w c000 --gres=gpu:1 nvidia-smi -L); rc=$?; echo "$out"
gpus=$(grep -c '^GPU ' <<< "$out")
if [ "$rc" = 0 ] && [ "$gpus" = 1 ]; then verdict ok "--gres=gpu:1: nvidia-smi -L lists 1 GPU"; else
  verdict FAIL "--gres=gpu:1: nvidia-smi -L lists $gpus GPUs (exit $rc), not 1"; fi
out=$(run_job -w c000 nvidia-smi -L); rc=$?; echo "$out"
gpus=$(grep -c '^GPU ' <<< "$out")
if [ "$gpus" = 0 ]; then verdict ok "no --gres: nvidia-smi -L lists no GPU (exit $rc)"; else
  verdict FAIL "no --gres: nvidia-smi -L lists $gpus GPUs: the job's devices cgroup let the GPU through"; fi
# The acceptance probe: the job's GPU opens, another (195:1) does not, nvidia-smi agrees, and
# a CUDA computation (libcuda through ctypes: 16 MiB written, copied and read back).
out=$(run_job -w c000 --gres=gpu:1 --mem=3G python3 -c "$(probe)" '{"gpus": ["/dev/nvidia0"], "others": [[195, 1]], "gres": 1}')
rc=$?; echo "$out"
if [ "$rc" = 0 ] && grep -q '^ok CUDA' <<< "$out" && ! grep -q '^FAIL' <<< "$out"; then verdict ok "the acceptance probe and CUDA through srun"; else
  verdict FAIL "the acceptance probe through srun (exit $rc)"; fi
# shellcheck disable=SC2016 # expanded in the job
show_cgroup='cg=$(sed -n "s/^0:://p" /proc/self/cgroup); echo "/proc/self/cgroup: $(cat /proc/self/cgroup) ($(stat -fc %T /sys/fs/cgroup))"
  job=${cg%%/step_*}; for f in memory.max cpuset.cpus.effective; do echo "job cgroup $f: $(cat /sys/fs/cgroup$job/$f 2>&1)"; done'
for n in "${NODES[@]}"; do
  out=$(run_job -w "$n" sh -c "$show_cgroup"); echo "$out"
  if grep -q 'cgroup2fs' <<< "$out" && grep -q '/job_[0-9]*/step_' <<< "$out"; then verdict ok "$n: the job runs in its own cgroup v2"; else
    verdict FAIL "$n: the job is not in a Slurm job cgroup of cgroup v2"; fi
done
containers_jobs
squeue 2>&1 | head -5
[ "$failed" = 0 ] && echo "slurm check passed" || { echo "slurm check FAILED"; logs; }
exit "$failed"
