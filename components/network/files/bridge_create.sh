# A host bridge marked as this cluster's; with NAT_SUBNET also forwarding and masquerading.
require CLUSTER CLUSTER_DIR BRIDGE ADDRESS NAT_SUBNET
owner="gpucluster:$CLUSTER"
tag="gpucluster:$CLUSTER:bridge:$BRIDGE"
if [ -e "/sys/class/net/$BRIDGE" ]; then
  [ "$(cat "/sys/class/net/$BRIDGE/ifalias" 2>/dev/null)" = "$owner" ] ||
    die "interface $BRIDGE exists and is not this cluster's"
else
  ip link add "$BRIDGE" type bridge
  ip link set dev "$BRIDGE" alias "$owner"
fi
if [ -n "$ADDRESS" ] && ! ip -4 -o addr show dev "$BRIDGE" | grep -qw -- "$ADDRESS"; then
  ip addr flush dev "$BRIDGE"
  ip addr add "$ADDRESS" dev "$BRIDGE"
fi
ip link set dev "$BRIDGE" up
if [ -n "$NAT_SUBNET" ]; then
  mkdir -p "$CLUSTER_DIR"
  # Remember the host's setting once, so destroy can put it back.
  [ -e "$CLUSTER_DIR/ip_forward.orig" ] || cat /proc/sys/net/ipv4/ip_forward > "$CLUSTER_DIR/ip_forward.orig"
  sysctl -qw net.ipv4.ip_forward=1
  ensure_rule nat POSTROUTING -s "$NAT_SUBNET" ! -d "$NAT_SUBNET" -m comment --comment "$tag" -j MASQUERADE
  ensure_rule filter FORWARD -i "$BRIDGE" -m comment --comment "$tag" -j ACCEPT
  ensure_rule filter FORWARD -o "$BRIDGE" -m conntrack --ctstate RELATED,ESTABLISHED,DNAT -m comment --comment "$tag" -j ACCEPT
fi
