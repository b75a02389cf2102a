# Packages stay installed: removing one can take its reverse dependencies along, and another
# cluster or the site may use it. Their list is kept in the cluster's directory under
# KEEP_DIR (purge-kept.sh removes it), then the (now empty) state directory goes.
require CLUSTER RECORD KEEP_DIR
if [ -s "$RECORD" ]; then
  kept="$KEEP_DIR/$CLUSTER/packages-left-installed"
  mkdir -p "$(dirname "$kept")"
  sort -u "$RECORD" > "$kept"
  log "left installed (this cluster installed them; others may need them): $(paste -sd' ' "$kept")"
  log "their list is in $kept"
fi
rm -f "$RECORD"
cluster_dir=$(dirname "$RECORD")
rmdir --ignore-fail-on-non-empty "$cluster_dir" 2>/dev/null || true
rmdir --ignore-fail-on-non-empty "$(dirname "$cluster_dir")" 2>/dev/null || true
