# Stop and destroy the container; succeed when it is already gone.
require CLUSTER CONTAINER
lxc_exists "$CONTAINER" || exit 0
[ "$(lxc_owner "$CONTAINER")" = "$CLUSTER" ] || die "LXC container $CONTAINER is not this cluster's; not removing it"
lxc-stop -n "$CONTAINER" -k >/dev/null 2>&1 || true
lxc-destroy -n "$CONTAINER" -f >&2
