# The accounting database's container: a Debian container of its own (MariaDB and slurmdbd
# installed by LXC's Debian template, from the download cache the node image uses too), on the
# NAT bridge, with the database's data directory bound in from the host so it outlives the
# container. Not a clone of the node image: a node image change leaves the database alone.
require CLUSTER CLUSTER_DIR CONTAINER NODE_HOSTNAME LXC_CONFIG NAT_ADDRESS RELEASE PACKAGES DATA_DIR
exec 3>&1 1>&2
dir=$(lxc_dir "$CONTAINER")
# Renamed (accounting.name changed): the previous run printed the old name, which the engine
# hands back on update. Same address and the same data directory: the old container (its
# MariaDB shut down cleanly) goes before the new one is made.
previous=${PULUMI_COMMAND_STDOUT:-}
if [ -n "$previous" ] && [ "$previous" != "$CONTAINER" ] && lxc_exists "$previous" &&
  [ "$(lxc_owner "$previous")" = "$CLUSTER" ]; then
  log "renamed from $previous: removing it"
  lxc-stop -n "$previous" -t 60 || lxc-stop -n "$previous" -k || true
  lxc-destroy -n "$previous" -f
fi
if lxc_exists "$CONTAINER" || [ -d "$dir" ]; then
  lxc_ours "$CLUSTER" "$CLUSTER_DIR" "$CONTAINER" || die "LXC container $CONTAINER exists and is not this cluster's"
  if lxc_pending "$CLUSTER_DIR" "$CONTAINER"; then
    log "removing $CONTAINER left half-made by an interrupted run"
    lxc-destroy -n "$CONTAINER" -f || rm -rf "$dir"
  fi
fi
if ! lxc_exists "$CONTAINER"; then
  mkdir -p "$CLUSTER_DIR/pending"
  touch "$(lxc_pending_marker "$CLUSTER_DIR" "$CONTAINER")"
  # Whoever finds the download cache missing records it; the node image's delete removes it.
  [ -d /var/cache/lxc/debian ] || touch "$CLUSTER_DIR/lxc-cache-created"
  DEBIAN_FRONTEND=noninteractive lxc-create -n "$CONTAINER" -t debian -- -r "$RELEASE" \
    --packages="$(lines "$PACKAGES" | paste -sd, -)"
  rootfs="$dir/rootfs"
  # LXC sets the address (no DHCP stall at boot); no password logins, no SSH server.
  printf 'auto lo\niface lo inet loopback\n\niface eth0 inet manual\n' > "$rootfs/etc/network/interfaces"
  chroot "$rootfs" passwd -l root >/dev/null
  rm -f "$rootfs"/etc/systemd/system/multi-user.target.wants/ssh.service "$rootfs"/etc/systemd/system/sshd.service
  # slurmdbd starts once configured, with the cluster's munge key (none from the package).
  rm -f "$rootfs/etc/munge/munge.key" "$rootfs"/etc/systemd/system/multi-user.target.wants/{munge,slurmdbd}.service
  lxc_mark "$CLUSTER" "$CLUSTER_DIR" "$CONTAINER"
fi
[ -d "$DATA_DIR" ] || die "data directory $DATA_DIR is missing (made by the accounting data resource)"
printf '%s\n' "$LXC_CONFIG" | write_if_changed "$dir/gpucluster.conf" 0644 && changed=1 || changed=0
grep -qxF "lxc.include = $dir/gpucluster.conf" "$dir/config" ||
  printf 'lxc.include = %s\n' "$dir/gpucluster.conf" >> "$dir/config"
if lxc_running "$CONTAINER" && [ "$changed" = 1 ]; then
  log "$CONTAINER: config changed, restarting"
  lxc-stop -n "$CONTAINER" -t 30
fi
lxc_running "$CONTAINER" || lxc-start -n "$CONTAINER" -d
ip neigh flush to "$NAT_ADDRESS" 2>/dev/null || true
wait_until 120 "systemd in $CONTAINER" systemd_ready "$CONTAINER"
in_ct "$CONTAINER" ip -4 -o addr show dev eth0 | grep -qF " $NAT_ADDRESS/" || die "$CONTAINER has no address $NAT_ADDRESS on eth0"
printf '%s\n' "$NODE_HOSTNAME" | ct_write_if_changed "$CONTAINER" /etc/hostname 0644 root:root || true
in_ct "$CONTAINER" hostname "$NODE_HOSTNAME"
in_ct "$CONTAINER" sed -i "s/^127\.0\.1\.1[[:space:]].*/127.0.1.1\t$NODE_HOSTNAME/" /etc/hosts
printf '%s\n' "$CONTAINER" >&3
