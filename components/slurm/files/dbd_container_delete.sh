# Stop and destroy the accounting container (also one left half-made); its data directory on
# the host is the data resource's. Succeeds when the container is already gone.
require CLUSTER CLUSTER_DIR CONTAINER
if lxc_exists "$CONTAINER" || [ -d "$(lxc_dir "$CONTAINER")" ]; then
  lxc_ours "$CLUSTER" "$CLUSTER_DIR" "$CONTAINER" || die "LXC container $CONTAINER is not this cluster's; not removing it"
  lxc-stop -n "$CONTAINER" -k >/dev/null 2>&1 || true
  lxc-destroy -n "$CONTAINER" -f >&2 || rm -rf "$(lxc_dir "$CONTAINER")"
fi
rm -f "$(lxc_pending_marker "$CLUSTER_DIR" "$CONTAINER")"
rmdir "$CLUSTER_DIR/pending" 2>/dev/null || true
