# Remove the routes and rules the create made (recorded); nothing to do when they are gone.
require CLUSTER CLUSTER_DIR
record="$CLUSTER_DIR/routes"
[ -f "$record" ] || exit 0
while read -r subnet via; do
  [ -n "$subnet" ] || continue
  ip route del "$subnet" via "$via" 2>/dev/null || true
  delete_tagged_rules "gpucluster:$CLUSTER:route:$subnet"
done < "$record"
rm -f "$record"
