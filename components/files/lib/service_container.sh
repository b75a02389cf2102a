# A service container of the cluster's own (the accounting database, the stack's registry):
# made by LXC's Debian template with its packages (from the download cache the node image
# uses too), not a clone of the node image, so a node image change leaves it alone; on the NAT
# bridge at a fixed address, with host directories bound in (LXC_CONFIG) so its data outlives
# it. service_container_up [PREPARE]: PREPARE, a function, runs on the new rootfs before its
# first start (keeping a package's daemon from starting unconfigured). Uses CLUSTER
# CLUSTER_DIR CONTAINER NODE_HOSTNAME LXC_CONFIG NAT_ADDRESS RELEASE PACKAGES.
service_container_up() {
  local prepare=${1-} dir rootfs changed
  dir=$(lxc_dir "$CONTAINER")
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
    [ -z "$prepare" ] || "$prepare" "$rootfs"
    lxc_mark "$CLUSTER" "$CLUSTER_DIR" "$CONTAINER"
  fi
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
}

# service_container_down: stop and destroy it (also one left half-made); the directories
# bound into it stay, they are their data resource's. Succeeds when it is already gone.
service_container_down() {
  if lxc_exists "$CONTAINER" || [ -d "$(lxc_dir "$CONTAINER")" ]; then
    lxc_ours "$CLUSTER" "$CLUSTER_DIR" "$CONTAINER" || die "LXC container $CONTAINER is not this cluster's; not removing it"
    lxc-stop -n "$CONTAINER" -k >/dev/null 2>&1 || true
    lxc-destroy -n "$CONTAINER" -f >&2 || rm -rf "$(lxc_dir "$CONTAINER")"
  fi
  rm -f "$(lxc_pending_marker "$CLUSTER_DIR" "$CONTAINER")"
  rmdir "$CLUSTER_DIR/pending" 2>/dev/null || true
}
