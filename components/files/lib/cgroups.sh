# Can LXC give the nodes the cgroup controllers their config needs? Checked by the preflight
# before anything changes: a node with a cpuset fails to start when LXC cannot delegate the
# controllers from its base cgroup, and without them Slurm's cgroup plugin in a node has none.

# Controllers the node config needs: cpuset (nodes[].cpus), memory and pids (Slurm's job
# containment in a node); on cgroup v1 also devices (the GPU allow lines).
CGROUP_V2_NEEDED="cpuset memory pids"
CGROUP_V1_NEEDED="cpuset devices memory pids"

# cgroup_v2_problems CGROUP_FS PID1_CGROUP_FILE: one line per controller LXC cannot delegate.
# LXC's base cgroup is PID 1's (the `0::` line of /proc/1/cgroup); it can enable a controller
# for the containers' cgroups when the controller is available there and either already
# enabled for its children or the base holds no processes (cgroup v2's no-internal-process
# rule; the root cgroup is exempt).
cgroup_v2_problems() {
  local fs=$1 base dir available enabled controller
  base=$(sed -n 's/^0:://p' "$2" 2>/dev/null | head -n1)
  [ -n "$base" ] || { echo "cgroup v2: PID 1's cgroup is unknown ($2 has no 0:: line): LXC's base cgroup cannot be checked"; return 0; }
  dir=$fs${base%/}
  available=" $(cat "$dir/cgroup.controllers" 2>/dev/null) "
  enabled=" $(cat "$dir/cgroup.subtree_control" 2>/dev/null) "
  for controller in $CGROUP_V2_NEEDED; do
    if [[ $available != *" $controller "* ]]; then
      echo "cgroup v2: the $controller controller is not available in LXC's base cgroup $base (PID 1's; its cgroup.controllers has:${available% }): the nodes need it (cpuset for nodes[].cpus, memory and pids for Slurm's job containment); enable it in the parent cgroups' cgroup.subtree_control"
    elif [[ $enabled != *" $controller "* ]] && [ "$base" != / ] && [ -s "$dir/cgroup.procs" ]; then
      echo "cgroup v2: LXC's base cgroup $base (PID 1's) holds processes, so it cannot enable the $controller controller for the nodes (cgroup v2 allows controllers only below cgroups without processes; LXC would fail with 'Device or resource busy' and every node with nodes[].cpus would fail to start): run the cluster on a host whose PID 1 is in the root cgroup (a systemd host), or move $base's processes into a child cgroup and enable +$controller in its cgroup.subtree_control"
    fi
  done
}

# cgroup_v1_problems MOUNTS_FILE: one line per controller without a mounted v1 hierarchy.
cgroup_v1_problems() {
  local controller
  for controller in $CGROUP_V1_NEEDED; do
    awk -v c="$controller" '$3 == "cgroup" { n = split($4, o, ","); for (i = 1; i <= n; i++) if (o[i] == c) found = 1 } END { exit !found }' "$1" ||
      echo "cgroup v1: no $controller hierarchy is mounted ($1 has no cgroup mount with $controller): LXC needs it for the nodes (cpuset for nodes[].cpus, devices for the GPU allow lines, memory and pids for Slurm's job containment); mount it under /sys/fs/cgroup/$controller"
  done
}
