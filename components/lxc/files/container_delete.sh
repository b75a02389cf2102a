# Stop and destroy the container (also one left half-made); succeed when it is already gone.
require CLUSTER CLUSTER_DIR IMAGE CONTAINER
if lxc_exists "$CONTAINER" || [ -d "$(lxc_dir "$CONTAINER")" ]; then
  lxc_ours "$CLUSTER" "$CLUSTER_DIR" "$CONTAINER" "$IMAGE" ||
    die "LXC container $CONTAINER is not this cluster's; not removing it"
  lxc-stop -n "$CONTAINER" -k >/dev/null 2>&1 || true
  lxc-destroy -n "$CONTAINER" -f >&2 || rm -rf "$(lxc_dir "$CONTAINER")"
fi
subids_release "$CONTAINER" # an unprivileged container's host ids (nothing for another)
rm -f "$(lxc_pending_marker "$CLUSTER_DIR" "$CONTAINER")"
rmdir "$CLUSTER_DIR/pending" 2>/dev/null || true
