# Build the node image once: a stopped Debian container that every node is cloned from; or
# restore the one destroy kept, when it was built from the same definition (IMAGE_DIGEST).
require CLUSTER CLUSTER_DIR IMAGE RELEASE PACKAGES IMAGE_DIGEST KEPT_DIR KEEP_IMAGE
dir=$(lxc_dir "$IMAGE")
if lxc_exists "$IMAGE" || [ -d "$dir" ]; then
  lxc_ours "$CLUSTER" "$CLUSTER_DIR" "$IMAGE" || die "LXC container $IMAGE exists and is not this cluster's"
  [ -f "$dir/gpucluster-image-ready" ] && exit 0
  log "removing $IMAGE left half-built by an interrupted run"
  lxc-destroy -n "$IMAGE" -f >&2 || rm -rf "$dir"
fi
# The pending marker first: an interruption before the owner marker is not a foreign image.
lxc_pending_begin "$CLUSTER_DIR" "$IMAGE"
kept="$KEPT_DIR/node-image-$IMAGE_DIGEST"
if [ "$KEEP_IMAGE" = true ] && [ -f "$kept/gpucluster-image-ready" ]; then
  log "restoring the node image kept in $kept"
  mkdir -p "$(dirname "$dir")"
  mv "$kept" "$dir"
  lxc_mark "$CLUSTER" "$CLUSTER_DIR" "$IMAGE"
  exit 0
fi
# Remember whether the download cache was ours, so destroy removes only what it made.
[ -d /var/cache/lxc/debian ] || touch "$CLUSTER_DIR/lxc-cache-created"
packages=$(lines "$PACKAGES" | paste -sd, -)
lxc-create -n "$IMAGE" -t debian -- -r "$RELEASE" --packages="$packages" >&2
lxc_mark "$CLUSTER" "$CLUSTER_DIR" "$IMAGE"

rootfs="$dir/rootfs"
# LXC sets the addresses: ifupdown must not run DHCP on them (it stalls every boot ~60 s).
printf 'auto lo\niface lo inet loopback\n\niface eth0 inet manual\niface eth1 inet manual\n' \
  > "$rootfs/etc/network/interfaces"
# No password logins: root locked, no SSH server running (nodes are reached with lxc-attach).
chroot "$rootfs" passwd -l root >/dev/null
rm -f "$rootfs"/etc/systemd/system/multi-user.target.wants/ssh.service \
  "$rootfs"/etc/systemd/system/sshd.service
# Nothing Slurm-related starts before its node is configured: no image-wide munge key,
# no daemons enabled. Configless slurmd has no slurm.conf, so drop that unit condition.
rm -f "$rootfs/etc/munge/munge.key" \
  "$rootfs"/etc/systemd/system/multi-user.target.wants/{munge,slurmd,slurmctld}.service
# Nor the node exporter: the metrics enable it where they are configured.
rm -f "$rootfs"/etc/systemd/system/multi-user.target.wants/prometheus-node-exporter.service
mkdir -p "$rootfs/etc/systemd/system/slurmd.service.d"
printf '[Unit]\nConditionPathExists=\n' > "$rootfs/etc/systemd/system/slurmd.service.d/gpucluster.conf"
printf '%s\n' "$IMAGE_DIGEST" > "$dir/gpucluster-image-digest"
touch "$dir/gpucluster-image-ready"
