#!/bin/bash
# GPU health check of one node, run by slurmd as its HealthCheckProgram (as root, every
# HealthCheckInterval; Slurm kills it after 60 s, so every probe has a short timeout).
# Checks: each GPU device node of the node is there with its major:minor and opens (a stand-in
# device answers ENXIO, which passes; a device refused by the cgroup fails); on a node with
# real GPUs (a device a driver answers), `nvidia-smi -L` must run and count as many GPUs: a
# missing, placeholder or failing nvidia-smi drains the node, never a silent skip (stand-ins
# have no driver, so no nvidia-smi is needed); Slurm's GRES count for the node is the same number.
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
real=0 # a device that a driver answers: real GPUs, whose driver files the node must have
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
      *) problems+=("$device cannot be opened (${error##*: })") real=1 ;;
    esac
  else
    real=1
  fi
done < <(grep -v '^#' "$conf" 2>/dev/null || true)

# The first nvidia-smi on PATH, executable or not: a bind mount's empty placeholder (LXC's
# create=file) is no nvidia-smi.
smi=""
IFS=: read -ra path_dirs <<< "$PATH"
for dir in "${path_dirs[@]}"; do
  if [ -n "$dir" ] && [ -e "$dir/nvidia-smi" ]; then smi=$dir/nvidia-smi; break; fi
done
if [ -n "$smi" ] && [ -f "$smi" ] && [ -x "$smi" ] && [ -s "$smi" ]; then
  if listing=$(timeout 20 "$smi" -L 2>&1); then
    seen=$(grep -c '^GPU ' <<< "$listing" || true)
    [ "$seen" = "$expected" ] || problems+=("nvidia-smi -L lists $seen GPUs, not $expected")
  else
    problems+=("nvidia-smi -L failed: $(tail -n1 <<< "$listing")")
  fi
elif [ "$real" = 1 ] && [ -n "$smi" ]; then
  problems+=("nvidia-smi at $smi is not an executable program (an empty bind placeholder?): the driver's files are not bound into the node (gpu.driver_files; the container create log names what was found)")
elif [ "$real" = 1 ]; then
  problems+=("nvidia-smi not found on PATH with real GPUs: the driver's files are not bound into the node (gpu.driver_files; the container create log names what was found)")
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
