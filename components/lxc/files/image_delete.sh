# Remove the node image, and the LXC download cache if this cluster created it. With
# KEEP_IMAGE, a built image goes to the kept directory instead (one per cluster: the last one
# destroyed), named by the digest it was built under; ./purge-kept.sh removes it.
require CLUSTER CLUSTER_DIR IMAGE RELEASE KEPT_DIR KEEP_IMAGE
dir=$(lxc_dir "$IMAGE")
if lxc_exists "$IMAGE" || [ -d "$dir" ]; then
  lxc_ours "$CLUSTER" "$CLUSTER_DIR" "$IMAGE" || die "LXC container $IMAGE is not this cluster's; not removing it"
  # A clone on the image (one a failed create left, which no state holds) would lose its lower
  # layer to the removal below and come back broken at the next boot: stop and name it.
  clones=""
  for config in "$(dirname "$dir")"/*/config; do
    name=$(basename "$(dirname "$config")")
    if [ "$name" != "$IMAGE" ] && [ -f "$config" ] && lxc_on_image "$name" "$IMAGE"; then
      clones+=" $name"
    fi
  done
  [ -z "$clones" ] || die "node image $IMAGE still has containers cloned from it:$clones; remove them first (lxc-destroy -n NAME)"
  digest=$(cat "$dir/gpucluster-image-digest" 2>/dev/null || true)
  if [ "$KEEP_IMAGE" = true ] && [ -n "$digest" ] && [ -f "$dir/gpucluster-image-ready" ]; then
    rm -rf "$KEPT_DIR"/node-image-*
    mkdir -p "$KEPT_DIR"
    mv "$dir" "$KEPT_DIR/node-image-$digest"
    log "node image kept in $KEPT_DIR/node-image-$digest (./purge-kept.sh $CLUSTER removes it)"
  else
    lxc-destroy -n "$IMAGE" -f >&2 || rm -rf "$dir"
  fi
fi
if [ "$KEEP_IMAGE" != true ]; then
  rm -rf "$KEPT_DIR"/node-image-*
  rmdir "$KEPT_DIR" 2>/dev/null || true
  # Several hosts keep theirs in a folder per host, inside the cluster's.
  [ "$(basename "$KEPT_DIR")" = "$CLUSTER" ] || rmdir "$(dirname "$KEPT_DIR")" 2>/dev/null || true
fi
rm -f "$(lxc_pending_marker "$CLUSTER_DIR" "$IMAGE")" "$CLUSTER_DIR/image-build.log"
rmdir "$CLUSTER_DIR/pending" 2>/dev/null || true
# LXC leaves an empty lxc.pivot cgroup behind on cgroup v1 hosts; busy ones refuse rmdir.
rmdir /sys/fs/cgroup/*/lxc.pivot 2>/dev/null || true
if [ -f "$CLUSTER_DIR/lxc-cache-created" ]; then
  # The marker names the cache the create made (an earlier release left it empty: the default).
  lxc_cache=$(cat "$CLUSTER_DIR/lxc-cache-created")
  [[ $lxc_cache == /*/debian ]] || lxc_cache=/var/cache/lxc/debian
  rm -rf "$lxc_cache"
  rmdir --ignore-fail-on-non-empty "$(dirname "$lxc_cache")" 2>/dev/null || true
  rm -f "$CLUSTER_DIR/lxc-cache-created"
fi
