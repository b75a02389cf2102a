# Health gate: the apply fails, loudly, when a node is not serving or a test job cannot run.
# It never waits on users' jobs: allocated and mixed nodes are healthy, test jobs run only on
# idle nodes (`--immediate`), and a drained node is a warning, unless its slurmd (re)started
# since the gate last passed: those nodes must serve. Slurm itself says when each node's
# slurmd started (SlurmdStartTime, reported by the node at registration), so nodes of every
# host are covered, wherever the gate runs; the gate keeps the start times it passed with.
require CLUSTER_DIR NODES
use_cluster_slurm
passed="$CLUSTER_DIR/health-passed"
states() { sinfo -h -N -n "$NODES" -o '%N %T' | sort -u; }
serving_state() { case "$1" in idle | mixed | allocated | completing) return 0 ;; *) return 1 ;; esac; }
not_serving() {
  states | while read -r node state; do
    serving_state "$state" || case "$state" in drained | draining) ;; *) echo "$node ($state)" ;; esac
  done
}
all_serving() { [ -z "$(not_serving)" ]; }
wait_until 60 "every node of $NODES to serve" all_serving

# "NODE SLURMDSTARTTIME" per node ("None" for a node that never registered).
starts() {
  scontrol -o show node "$NODES" |
    sed -nE 's/^NodeName=([^ ]+) .*SlurmdStartTime=([^ ]+).*/\1 \2/p' | sort -u
}
current=$(starts)
fresh=()
while read -r node started; do
  [ -n "$node" ] || continue
  grep -qxF "$node $started" "$passed" 2>/dev/null || fresh+=("$node")
done <<< "$current"
while read -r node state; do
  [[ " ${fresh[*]} " == *" $node "* ]] && ! serving_state "$state" && die "node $node was just (re)started but is $state"
  case "$state" in drained | draining)
    reason=$(sinfo -h -N -n "$node" -o '%E' | head -n1)
    log "warning: node $node is $state (${reason:-no reason}); not testing it" ;;
  esac
done < <(states)

idle=$(sinfo -h -N -n "$NODES" -t idle -o %N | sort -u | paste -sd, -)
tested=0
if [ -n "$idle" ]; then
  count=$(tr ',' '\n' <<<"$idle" | wc -l)
  answered=$(timeout 120 srun --immediate=30 --chdir=/tmp -N "$count" -w "$idle" hostname | sort -u | wc -l)
  [ "$answered" = "$count" ] || die "srun -N$count -w $idle hostname answered from $answered of $count idle nodes"
  tested=$count
fi
for node in "${fresh[@]}"; do
  [[ ",$idle," == *",$node,"* ]] || log "node $node is busy with jobs already: it serves"
done

gpu_node=$(sinfo -h -N -n "$NODES" -t idle -o '%N %G' | awk '$2 ~ /gpu/ {print $1; exit}')
if [ -n "$gpu_node" ]; then
  visible=$(timeout 120 srun --immediate=30 --chdir=/tmp -N1 -w "$gpu_node" --gres=gpu:1 printenv CUDA_VISIBLE_DEVICES) ||
    die "srun --gres=gpu:1 on $gpu_node failed"
  [ -n "$visible" ] || die "srun --gres=gpu:1 on $gpu_node ran without CUDA_VISIBLE_DEVICES"
elif sinfo -h -N -n "$NODES" -o '%G' | grep -q gpu; then
  log "warning: every GPU node is busy; no GPU test job this time"
fi
# The test jobs' epilogs (Pyxis' lists the person's containers) end before the gate does: the
# nodes it tested are idle again, not completing, when `up` returns. Bounded: past 60 s the
# gate passes all the same (a job of someone's may have started there meanwhile).
if [ -n "$idle" ]; then
  settle_by=$((SECONDS + 60))
  while [ -n "$(sinfo -h -N -n "$idle" -t completing -o %N)" ] && [ "$SECONDS" -lt "$settle_by" ]; do sleep 0.5; done
fi
printf '%s\n' "$current" > "$passed.new" && mv -f "$passed.new" "$passed"
echo "healthy: every node serves; $tested idle node(s) answered srun; GPU job on ${gpu_node:-none}: CUDA_VISIBLE_DEVICES=${visible:-n/a}"
