# Remove the bridge and exactly its rules; restore ip_forward as it was before the cluster.
require CLUSTER CLUSTER_DIR BRIDGE NAT_SUBNET
delete_tagged_rules "gpucluster:$CLUSTER:bridge:$BRIDGE"
if [ -e "/sys/class/net/$BRIDGE" ]; then
  if [ "$(cat "/sys/class/net/$BRIDGE/ifalias" 2>/dev/null)" = "gpucluster:$CLUSTER" ]; then
    ip link del "$BRIDGE"
  else
    log "leaving $BRIDGE alone: it is not this cluster's"
  fi
fi
if [ -n "$NAT_SUBNET" ] && [ -f "$CLUSTER_DIR/ip_forward.orig" ]; then
  # Another cluster's bridge still needs forwarding: then leave it on.
  if ! grep -qs '^gpucluster:' /sys/class/net/*/ifalias; then
    sysctl -qw "net.ipv4.ip_forward=$(cat "$CLUSTER_DIR/ip_forward.orig")"
  fi
  rm -f "$CLUSTER_DIR/ip_forward.orig"
fi
