# A host bridge marked as this cluster's; with NAT_SUBNET also forwarding and masquerading.
# Either bridge refuses new connections routed into it but for what it admits (inbound_rules:
# BURST_ACCESS, burst nodes to Slurm, on the NAT bridge only).
require CLUSTER CLUSTER_DIR BRIDGE ADDRESS NAT_SUBNET
bridge_up "$CLUSTER" "$BRIDGE" "$ADDRESS"
[ -z "$NAT_SUBNET" ] || ip_forward_acquire "$CLUSTER"
bridge_rules_up "$CLUSTER" "$BRIDGE" "$NAT_SUBNET" "${BURST_ACCESS:-}"
