# Build the node image once: a stopped Debian container that every node is cloned from.
require CLUSTER CLUSTER_DIR IMAGE RELEASE PACKAGES
dir=$(lxc_dir "$IMAGE")
if lxc_exists "$IMAGE"; then
  [ "$(lxc_owner "$IMAGE")" = "$CLUSTER" ] || die "LXC container $IMAGE exists and is not this cluster's"
  [ -f "$dir/gpucluster-image-ready" ] && exit 0
  log "removing $IMAGE left half-built by an interrupted run"
  lxc-destroy -n "$IMAGE" -f >&2
fi
mkdir -p "$CLUSTER_DIR"
# Remember whether the download cache was ours, so destroy removes only what it made.
[ -d /var/cache/lxc/debian ] || touch "$CLUSTER_DIR/lxc-cache-created"
packages=$(lines "$PACKAGES" | paste -sd, -)
lxc-create -n "$IMAGE" -t debian -- -r "$RELEASE" --packages="$packages" >&2
echo "$CLUSTER" > "$dir/gpucluster-owner"

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
mkdir -p "$rootfs/etc/systemd/system/slurmd.service.d"
printf '[Unit]\nConditionPathExists=\n' > "$rootfs/etc/systemd/system/slurmd.service.d/gpucluster.conf"
touch "$dir/gpucluster-image-ready"
