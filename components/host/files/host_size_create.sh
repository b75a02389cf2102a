# The host's size, measured once (its stdout stays in the state and its inputs' changes are
# ignored, so the figure holds across upgrades): the kernel's MemTotal less the memory limits of
# the containers already on the host that are not on this cluster's NAT bridge (another
# cluster's nodes keep theirs), in MB, and the online CPUs. Nodes that set no memory_mb get a
# share of it by their CPUs (components/composition/node_memory.py); `pulumi up --replace` of
# this resource measures again (a host given more memory).
require NAT_BRIDGE
total_kb=$(awk '$1 == "MemTotal:" { print $2 }' /proc/meminfo)
others=0
for dir in "${LXC_PATH:-/var/lib/lxc}"/*/; do
  config=$dir/config
  [ -f "$config" ] || continue
  files=("$config")
  [ -f "$dir/gpucluster.conf" ] && files+=("$dir/gpucluster.conf")
  ! grep -qsE "^[[:space:]]*lxc\.net\.[0-9]+\.link[[:space:]]*=[[:space:]]*$NAT_BRIDGE[[:space:]]*\$" "${files[@]}" ||
    continue
  # Its limit in bytes (the last one LXC reads, either version's key); none: nothing kept.
  limit=$(sed -nE 's/^[[:space:]]*lxc\.cgroup2?\.memory\.(limit_in_bytes|max)[[:space:]]*=[[:space:]]*([0-9]+)[[:space:]]*$/\2/p' \
    "${files[@]}" | tail -n 1)
  others=$((others + ${limit:-0} / 1048576))
done
printf 'memory_mb=%s cpus=%s\n' $((total_kb / 1024 - others)) "$(getconf _NPROCESSORS_ONLN)"
