# The CPU topology slurmd reads in a node (hwloc's XML, HWLOC_XMLFILE). Slurm numbers a node's
# CPUs over the cores of the topology's packages (sockets), in order, and confines a job to the
# machine CPUs those numbers stand for; it loads the whole host's topology, so a node given
# CPUs 2-3 by its cpuset would put its first job on CPUs 0-1, outside the node (the job's
# start then fails). Here the node's own CPUs are the one package, and the host's other CPUs a
# group beside it, which Slurm counts as CPUs but never numbers: its CPUs 0..N-1 are the
# node's, each still a machine CPU.

# cpu_list_expand LIST: a kernel CPU list ("0-2,5") one CPU a line.
# In bash, not seq: every node's slurmd create runs it.
cpu_list_expand() {
  local part cpu parts
  IFS=, read -ra parts <<< "$1"
  for part in "${parts[@]}"; do
    [ -n "$part" ] || continue
    for ((cpu = 10#${part%-*}; cpu <= 10#${part#*-}; cpu++)); do echo "$cpu"; done
  done
}

# hwloc_mask CPU...: hwloc's bitmap text of those CPUs (32-bit words, the highest first).
hwloc_mask() {
  local cpu words=() top=0 i
  for cpu in "$@"; do [ "$cpu" -le "$top" ] || top=$cpu; done
  for ((i = 0; i <= top / 32; i++)); do words[i]=0; done
  for cpu in "$@"; do words[cpu / 32]=$((words[cpu / 32] | (1 << (cpu % 32)))); done
  for ((i = top / 32; i >= 0; i--)); do
    printf '0x%08x' "${words[i]}"
    [ "$i" = 0 ] || printf ','
  done
}

# hwloc_topology_xml ONLINE NODE_CPUS: the package of the node's CPUs (NODE_CPUS, a kernel CPU
# list) and a group of the host's other online CPUs (ONLINE), single-thread cores, in CPU order.
hwloc_topology_xml() {
  local online node others all gp=1
  online=$(cpu_list_expand "$1")
  node=$(cpu_list_expand "$2" | sort -n)
  # The online CPUs not in the node's list, in order (in bash: no program started per node).
  local cpu in_node=" ${node//$'\n'/ } "
  others=$(while read -r cpu; do [ -z "$cpu" ] || [[ $in_node == *" $cpu "* ]] || echo "$cpu"; done <<< "$online")
  # shellcheck disable=SC2046 # one CPU a word
  all=$(hwloc_mask $(printf '%s\n' "$online"))
  printf '%s\n' '<?xml version="1.0" encoding="UTF-8"?>' '<!DOCTYPE topology SYSTEM "hwloc2.dtd">' '<topology version="2.0">'
  printf '  <object type="Machine" os_index="0" %s allowed_cpuset="%s" %s gp_index="%s">\n' "$(hwloc_sets "$all")" "$all" \
    'allowed_nodeset="0x00000001"' "$((gp++))"
  # hwloc wants the children in the order of their first CPU.
  if [ -n "$others" ] && [ "$(head -n1 <<< "$others")" -lt "$(head -n1 <<< "$node")" ]; then
    hwloc_cores Group "$others"
    hwloc_cores Package "$node"
  else
    hwloc_cores Package "$node"
    [ -z "$others" ] || hwloc_cores Group "$others"
  fi
  printf '    <object type="NUMANode" os_index="0" %s gp_index="%s"/>\n' "$(hwloc_sets "$all")" "$((gp++))"
  printf '  </object>\n</topology>\n'
}

# hwloc_sets MASK: an object's cpuset and nodeset attributes (one NUMA node).
hwloc_sets() {
  printf 'cpuset="%s" complete_cpuset="%s" nodeset="0x00000001" complete_nodeset="0x00000001"' "$1" "$1"
}

# hwloc_cores TYPE CPUS: an object of TYPE (Package, Group) holding a core of one thread for each
# of CPUS (one a line); gp numbers hwloc_topology_xml's objects.
hwloc_cores() {
  local type=$1 cpu mask extra=""
  # shellcheck disable=SC2046 # one CPU a word
  mask=$(hwloc_mask $(printf '%s\n' "$2"))
  [ "$type" = Package ] && extra='os_index="0" '
  printf '    <object type="%s" %s%s gp_index="%s">\n' "$type" "$extra" "$(hwloc_sets "$mask")" "$((gp++))"
  while read -r cpu; do
    mask=$(hwloc_mask "$cpu")
    printf '      <object type="Core" os_index="%s" %s gp_index="%s">\n' "$cpu" "$(hwloc_sets "$mask")" "$((gp++))"
    printf '        <object type="PU" os_index="%s" %s gp_index="%s"/>\n' "$cpu" "$(hwloc_sets "$mask")" "$((gp++))"
    printf '      </object>\n'
  done <<< "$2"
  printf '    </object>\n'
}
