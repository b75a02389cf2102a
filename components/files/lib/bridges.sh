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
# and the replies to it. Nothing else is accepted into the bridge: each forward accepts its
# own port (forward_rules).
nat_rules() {
  local tag="gpucluster:$1:bridge:$2" bridge=$2 subnet=$3
  printf '%s\n' \
    "nat POSTROUTING -s $subnet ! -d $subnet -m comment --comment $tag -j MASQUERADE" \
    "filter FORWARD -i $bridge -s $subnet -m comment --comment $tag -j ACCEPT" \
    "filter FORWARD -o $bridge -d $subnet -m conntrack --ctstate RELATED,ESTABLISHED -m comment --comment $tag -j ACCEPT"
}
