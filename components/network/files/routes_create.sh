# Routes to the other hosts' container subnets via those hosts, with only the forwarding they
# need (lib/routes.sh route_rules); a route an earlier run made that is no longer wanted is removed.
# ROUTES: one SUBNET,VIA[,burst] per line. The record lists what this host routes now.
require CLUSTER CLUSTER_DIR NAT_BRIDGE NAT_SUBNET ROUTES
record="$CLUSTER_DIR/routes"
mkdir -p "$CLUSTER_DIR"
wanted=$(lines "$ROUTES")
if [ -f "$record" ]; then
  while read -r route; do
    [ -n "$route" ] && ! grep -qxF "$route" <<< "$wanted" || continue
    IFS=, read -r subnet via _ <<< "$route"
    route_down "$CLUSTER" "$subnet" "$via"
  done < "$record"
fi
mapfile -t routes <<< "$wanted"
routes_up "$CLUSTER" "$NAT_BRIDGE" "$NAT_SUBNET" "${routes[@]}"
printf '%s\n' "$wanted" > "$record"
