# Remove the bridge and exactly its rules; the last cluster using ip_forward restores it.
require CLUSTER CLUSTER_DIR BRIDGE NAT_SUBNET
delete_tagged_rules "gpucluster:$CLUSTER:bridge:$BRIDGE"
delete_tagged_rules "gpucluster:$CLUSTER:inbound:$BRIDGE"
if [ -e "/sys/class/net/$BRIDGE" ]; then
  if [ "$(cat "/sys/class/net/$BRIDGE/ifalias" 2>/dev/null)" = "gpucluster:$CLUSTER" ]; then
    ip link del "$BRIDGE"
  else
    log "leaving $BRIDGE alone: it is not this cluster's"
  fi
fi
[ -z "$NAT_SUBNET" ] || ip_forward_release "$CLUSTER"
