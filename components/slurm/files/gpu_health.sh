#!/bin/bash
# GPU health check of one node, run by slurmd as its HealthCheckProgram (as root, every
# HealthCheckInterval; Slurm kills it after 60 s, so every probe has a short timeout).
# Checks: each GPU device node of the node is there with its major:minor and opens (a stand-in
# device answers ENXIO, which passes; a device refused by the cgroup fails); `nvidia-smi -L`
# counts as many GPUs where it exists; Slurm's GRES count for the node is the same number.
# A failing node is drained with Reason="gpu-health: ..."; a node this check drained is
# resumed once it passes again. Drains set by anyone else are left alone.
# Installed by the slurmd create script with its list: /etc/gpucluster/gpu-health.conf,
# one "DEVICE MAJOR:MINOR" line per GPU.
set -uo pipefail
export PATH="${PATH:+$PATH:}/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" LC_ALL=C
conf=${GPU_HEALTH_CONF:-/etc/gpucluster/gpu-health.conf}
node=${GPU_HEALTH_NODE:-$(hostname -s)}
tag="gpu-health:"
# Configless nodes keep slurmd's copy of slurm.conf here; client commands use it.
for candidate in /run/slurm/conf/slurm.conf /var/lib/slurm/slurmd/conf-cache/slurm.conf; do
  if [ -z "${SLURM_CONF:-}" ] && [ -r "$candidate" ]; then export SLURM_CONF=$candidate; fi
done

problems=()
expected=0
[ -r "$conf" ] || problems+=("$conf missing")
while read -r device numbers; do
  [ -n "$device" ] || continue
  expected=$((expected + 1))
  if [ ! -e "$device" ]; then
    problems+=("$device missing")
  elif [ ! -c "$device" ]; then
    problems+=("$device is not a character device")
  elif [ "$(stat -c '%Hr:%Lr' "$device")" != "$numbers" ]; then
    problems+=("$device is $(stat -c '%Hr:%Lr' "$device"), not $numbers")
  elif ! error=$( (exec 3<"$device") 2>&1 ); then
    case "$error" in
      *"No such device or address"*) ;; # opened as far as a device without a driver goes
      *) problems+=("$device cannot be opened (${error##*: })") ;;
    esac
  fi
done < <(grep -v '^#' "$conf" 2>/dev/null || true)

# An executable one: a bind mount's empty placeholder (LXC's create=file) is no nvidia-smi.
smi=$(command -v nvidia-smi || true)
if [ -n "$smi" ] && [ -f "$smi" ] && [ -x "$smi" ]; then
  if listing=$(timeout 20 "$smi" -L 2>&1); then
    seen=$(grep -c '^GPU ' <<< "$listing" || true)
    [ "$seen" = "$expected" ] || problems+=("nvidia-smi -L lists $seen GPUs, not $expected")
  else
    problems+=("nvidia-smi -L failed: $(tail -n1 <<< "$listing")")
  fi
fi

# What the controller thinks of the node: state, GRES and drain reason ("" when unreachable).
node_info=$(timeout 15 sinfo -h -N -n "$node" -o '%T|%G|%E' 2>/dev/null | head -n1 || true)
IFS='|' read -r state gres reason <<< "$node_info"
if [ -n "$node_info" ]; then
  counted=$(grep -oE 'gpu(:[A-Za-z0-9_.-]+)?:[0-9]+' <<< "$gres" | grep -oE '[0-9]+$' | head -n1 || true)
  [ "${counted:-0}" = "$expected" ] || problems+=("Slurm counts ${counted:-0} GPUs (Gres), the node has $expected")
fi

if [ "${#problems[@]}" -gt 0 ]; then
  summary="$tag $(IFS=';'; echo "${problems[*]}" | sed 's/;/; /g')"
  echo "$node: $summary" >&2
  # Drain once (again only when the reason changes); keep any other drain's reason.
  if [ -n "$node_info" ] && [[ "$state" != *drain* || "$reason" == "$tag"* ]] && [ "$reason" != "$summary" ]; then
    timeout 15 scontrol update NodeName="$node" State=DRAIN Reason="$summary"
  fi
  exit 1
fi
if [[ "$state" == *drain* && "$reason" == "$tag"* ]]; then
  echo "$node: GPUs healthy again, resuming" >&2
  timeout 15 scontrol update NodeName="$node" State=RESUME
fi
exit 0
