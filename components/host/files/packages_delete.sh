# Remove only the packages this cluster installed, then its (now empty) state directory.
require RECORD
if [ -s "$RECORD" ]; then
  mapfile -t installed < <(sort -u "$RECORD")
  DEBIAN_FRONTEND=noninteractive apt-get remove -y -qq "${installed[@]}" >&2 || true
fi
rm -f "$RECORD"
cluster_dir=$(dirname "$RECORD")
rmdir --ignore-fail-on-non-empty "$cluster_dir" 2>/dev/null || true
rmdir --ignore-fail-on-non-empty "$(dirname "$cluster_dir")" 2>/dev/null || true
