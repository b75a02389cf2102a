# Routes to the other hosts' container subnets via those hosts, and only the forwarding that
# needs: connections from their subnets into our NAT bridge, no masquerading between hosts
# (slurmctld, slurmd and srun see each other's real addresses).
require CLUSTER CLUSTER_DIR NAT_BRIDGE NAT_SUBNET ROUTES
record="$CLUSTER_DIR/routes"
mkdir -p "$CLUSTER_DIR"
wanted=$(lines "$ROUTES")
# What an earlier run routed and is no longer wanted.
if [ -f "$record" ]; then
  while read -r subnet via; do
    grep -qxF "$subnet $via" <<< "$wanted" && continue
    ip route del "$subnet" via "$via" 2>/dev/null || true
    delete_tagged_rules "gpucluster:$CLUSTER:route:$subnet"
  done < "$record"
fi
while read -r subnet via; do
  tag="gpucluster:$CLUSTER:route:$subnet"
  ip route replace "$subnet" via "$via"
  iptables -t nat -C POSTROUTING -s "$NAT_SUBNET" -d "$subnet" -m comment --comment "$tag" -j RETURN 2>/dev/null ||
    iptables -t nat -I POSTROUTING -s "$NAT_SUBNET" -d "$subnet" -m comment --comment "$tag" -j RETURN
  iptables -C FORWARD -s "$subnet" -o "$NAT_BRIDGE" -m comment --comment "$tag" -j ACCEPT 2>/dev/null ||
    iptables -I FORWARD -s "$subnet" -o "$NAT_BRIDGE" -m comment --comment "$tag" -j ACCEPT
done <<< "$wanted"
printf '%s\n' "$wanted" > "$record"
