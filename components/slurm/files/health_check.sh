# Health gate: the apply fails, loudly, unless every node is idle, a job runs on every node,
# and a GPU job sees its GPU.
require SLURM_CONF NODES NODE_COUNT GPU_NODES
export SLURM_CONF
all_idle() { ! sinfo -h -N -n "$NODES" -o %T | grep -qv '^idle$'; }
wait_until 60 "nodes $NODES to be idle" all_idle
answered=$(timeout 120 srun --chdir=/tmp -N "$NODE_COUNT" -w "$NODES" hostname | sort -u | wc -l)
[ "$answered" = "$NODE_COUNT" ] || die "srun -N$NODE_COUNT hostname answered from $answered of $NODE_COUNT nodes"
if [ "$GPU_NODES" -gt 0 ]; then
  visible=$(timeout 120 srun --chdir=/tmp -N1 --gres=gpu:1 printenv CUDA_VISIBLE_DEVICES) ||
    die "srun --gres=gpu:1 failed"
  [ -n "$visible" ] || die "srun --gres=gpu:1 ran without CUDA_VISIBLE_DEVICES"
fi
echo "healthy: $NODE_COUNT nodes idle, srun answered from all, GPU job saw CUDA_VISIBLE_DEVICES=${visible:-n/a}"
