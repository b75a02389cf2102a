# Remove the node image, and the LXC download cache if this cluster created it.
require CLUSTER CLUSTER_DIR IMAGE RELEASE
if lxc_exists "$IMAGE"; then
  [ "$(lxc_owner "$IMAGE")" = "$CLUSTER" ] || die "LXC container $IMAGE is not this cluster's; not removing it"
  lxc-destroy -n "$IMAGE" -f >&2
fi
# LXC leaves an empty lxc.pivot cgroup behind on cgroup v1 hosts; busy ones refuse rmdir.
rmdir /sys/fs/cgroup/*/lxc.pivot 2>/dev/null || true
if [ -f "$CLUSTER_DIR/lxc-cache-created" ]; then
  rm -rf /var/cache/lxc/debian
  rmdir --ignore-fail-on-non-empty /var/cache/lxc 2>/dev/null || true
  rm -f "$CLUSTER_DIR/lxc-cache-created"
fi
