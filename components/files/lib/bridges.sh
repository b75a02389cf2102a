# The cluster's bridges and a NAT bridge's rules.
# bridge_up CLUSTER BRIDGE ADDRESS: the bridge, marked as the cluster's by its alias, with
# exactly ADDRESS (none when empty), up.
bridge_up() {
  local owner="gpucluster:$1" bridge=$2 address=$3
  if [ -e "/sys/class/net/$bridge" ]; then
    [ "$(cat "/sys/class/net/$bridge/ifalias" 2>/dev/null)" = "$owner" ] ||
      die "interface $bridge exists and is not this cluster's"
  else
    ip link add "$bridge" type bridge
    ip link set dev "$bridge" alias "$owner"
  fi
  if [ -n "$address" ] && ! ip -4 -o addr show dev "$bridge" | grep -qw -- "$address"; then
    ip addr flush dev "$bridge"
    ip addr add "$address" dev "$bridge"
  fi
  ip link set dev "$bridge" up
}

# nat_rules CLUSTER BRIDGE SUBNET: masquerading for a NAT bridge, its nodes' own traffic out
# and the replies to it. Appended at the end of their chains (bridge_create, boot), so they
# come after every bridge's inbound rules (inbound_rules).
nat_rules() {
  local tag="gpucluster:$1:bridge:$2" bridge=$2 subnet=$3
  printf '%s\n' \
    "nat POSTROUTING -s $subnet ! -d $subnet -m comment --comment $tag -j MASQUERADE" \
    "filter FORWARD -i $bridge -s $subnet -m comment --comment $tag -j ACCEPT" \
    "filter FORWARD -o $bridge -d $subnet -m conntrack --ctstate RELATED,ESTABLISHED -m comment --comment $tag -j ACCEPT"
}

# inbound_rules CLUSTER BRIDGE [ADMITTED]: what may open a connection into the bridge, then the
# refusal of every other one. Under an ACCEPT policy (Debian's) anything routed to a container
# subnet would otherwise reach every container port. Before the refusal: the bridge's own
# traffic between its ports (bridged; iptables sees it only with br_netfilter) and ADMITTED
# (space-separated SOURCES,ADDRESSES,PORTS: TCP from each source to each address's ports,
# each '+'-separated; burst nodes to slurmctld, slurmd and srun). Accepted earlier, on top of
# the chain: the forwards (forwards.sh), the other hosts' subnets (routes.sh). Tagged
# gpucluster:CLUSTER:inbound:BRIDGE.
inbound_rules() {
  local tag="gpucluster:$1:inbound:$2" bridge=$2 entry sources addresses ports source address
  printf '%s\n' "filter FORWARD -i $bridge -o $bridge -m comment --comment $tag -j ACCEPT"
  for entry in ${3:-}; do
    IFS=, read -r sources addresses ports <<< "$entry"
    for source in ${sources//+/ }; do
      for address in ${addresses//+/ }; do
        printf '%s\n' "filter FORWARD -s $source -d $address/32 -o $bridge -p tcp -m multiport --dports ${ports//+/,} -m comment --comment $tag -j ACCEPT"
      done
    done
  done
  printf '%s\n' "filter FORWARD -o $bridge -m conntrack --ctstate NEW -m comment --comment $tag -j REJECT"
}

# inbound_up CLUSTER BRIDGE [ADMITTED]: exactly the bridge's inbound rules, placed before the
# first rule of any cluster's nat_rules (appended last) or at the end of FORWARD: after the
# accepts on top, and before every bridge's accept of its traffic out, which would otherwise
# let one cluster's containers into another cluster's bridge depending on which came first.
inbound_up() {
  local tag="gpucluster:$1:inbound:$2" rules line position words try
  rules=$(inbound_rules "$@")
  rules_in_place "$tag" "$rules" && return 0
  delete_tagged_rules "$tag"
  while read -r line; do
    read -ra words <<< "$line"
    # Another create (the other bridge's, another cluster's) may change the chain between the
    # look and the insert: a position gone is looked up again.
    for try in 1 2 3 4 5; do
      # Rule numbers count from 1 after the -P line: line N of -S is rule N-1.
      position=$(iptables -w 30 -t filter -S FORWARD | awk '/--comment "?gpucluster:[^ "]+:bridge:/ { print NR - 1; exit }')
      if [ -z "$position" ]; then
        iptables -w 30 -t filter -A FORWARD "${words[@]:2}" && break
      else
        iptables -w 30 -t filter -I FORWARD "$position" "${words[@]:2}" 2>/dev/null && break
      fi
      [ "$try" -lt 5 ] || die "cannot insert into FORWARD: $line"
    done
  done <<< "$rules"
}

# bridge_rules_up CLUSTER BRIDGE NAT_SUBNET BURST_ACCESS: the bridge's NAT rules (with a NAT
# subnet) and its refusal, one bridge at a time on the host: the two bridges of a cluster, and
# other clusters', are made at once, and a refusal placed by looking at the chain must not see
# another bridge's rules appended between its look and its inserts.
bridge_rules_up() {
  mkdir -p /run/lock
  (
    flock 8
    if [ -n "$3" ]; then
      nat_rules "$1" "$2" "$3" | rules_up "gpucluster:$1:bridge:$2" append
    fi
    inbound_up "$1" "$2" "$4"
  ) 8>/run/lock/gpucluster-bridge-rules.lock
}

# inbound_misplaced CLUSTER BRIDGE: one line per FORWARD rule out of place around the bridge's
# refusal: the cluster's accepts (forwards, routes) after it, any cluster's nat_rules before it.
inbound_misplaced() {
  iptables -w 30 -t filter -S FORWARD | awk -v refusal="gpucluster:$1:inbound:$2" -v ours="gpucluster:$1:(fwd|route):" '
    (index($0, "\"" refusal "\"") || index($0, " " refusal " ")) && / -j REJECT/ { seen = 1; printf "%s", early; next }
    !seen && /--comment "?gpucluster:[^ "]+:bridge:/ { early = early "before the refusal into the bridge: " $0 "\n" }
    seen && $0 ~ ("--comment \"?" ours) && / -j ACCEPT/ { print "after the refusal into the bridge: " $0 }'
}
