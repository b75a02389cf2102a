# Routes to other hosts' container subnets, and their rules.
# route_rules CLUSTER BRIDGE NAT_SUBNET SUBNET VIA [KIND]: another host's containers (SUBNET, routed via
# that host at VIA) and ours talk with their own addresses (no masquerading), and connections
# from there, or from that host itself (its Slurm clients), are forwarded into our NAT bridge.
# KIND burst (the burst VPC, via the site's VPN router): no masquerading only; what burst nodes
# may open into the bridge is the bridge's own (inbound_rules, BURST_ACCESS).
route_rules() {
  local tag="gpucluster:$1:route:$4" bridge=$2 nat_subnet=$3 subnet=$4 via=$5 kind=${6:-}
  printf '%s\n' "nat POSTROUTING -s $nat_subnet -d $subnet -m comment --comment $tag -j RETURN"
  [ "$kind" != burst ] || return 0
  printf '%s\n' \
    "filter FORWARD -s $subnet -o $bridge -m comment --comment $tag -j ACCEPT" \
    "filter FORWARD -s $via/32 -o $bridge -m comment --comment $tag -j ACCEPT"
}

# routes_up CLUSTER BRIDGE NAT_SUBNET SUBNET,VIA[,KIND]...: a route to each other host's container
# subnet via that host, and its rules, inserted first (the RETURN must precede MASQUERADE).
routes_up() {
  local cluster=$1 bridge=$2 nat_subnet=$3 route subnet via kind line words
  shift 3
  for route in "$@"; do
    IFS=, read -r subnet via kind <<< "$route"
    ip route replace "$subnet" via "$via"
    while read -r line; do
      read -ra words <<< "$line"
      iptables -w 30 -t "${words[0]}" -C "${words[@]:1}" 2>/dev/null ||
        iptables -w 30 -t "${words[0]}" -I "${words[1]}" 1 "${words[@]:2}"
    done < <(route_rules "$cluster" "$bridge" "$nat_subnet" "$subnet" "$via" "$kind")
  done
}

# route_down CLUSTER SUBNET VIA: the route and its rules gone (nothing to do when they are).
route_down() {
  ip route del "$2" via "$3" 2>/dev/null || true
  delete_tagged_rules "gpucluster:$1:route:$2"
}
