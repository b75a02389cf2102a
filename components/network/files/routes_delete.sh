# Remove the routes and rules the create made (as recorded); nothing to do when they are gone.
require CLUSTER CLUSTER_DIR
record="$CLUSTER_DIR/routes"
[ -f "$record" ] || exit 0
while IFS=, read -r subnet via _; do
  [ -z "$subnet" ] || route_down "$CLUSTER" "$subnet" "$via"
done < "$record"
rm -f "$record"
