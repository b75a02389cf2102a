# A host bridge marked as this cluster's; with NAT_SUBNET also forwarding and masquerading.
# Either bridge refuses new connections routed into it but for what it admits (inbound_rules:
# BURST_ACCESS, burst nodes to Slurm, on the NAT bridge only).
require CLUSTER CLUSTER_DIR BRIDGE ADDRESS NAT_SUBNET
bridge_up "$CLUSTER" "$BRIDGE" "$ADDRESS"
if [ -n "$NAT_SUBNET" ]; then
  ip_forward_acquire "$CLUSTER"
  nat_rules "$CLUSTER" "$BRIDGE" "$NAT_SUBNET" | rules_up "gpucluster:$CLUSTER:bridge:$BRIDGE" append
fi
inbound_up "$CLUSTER" "$BRIDGE" "${BURST_ACCESS:-}"
