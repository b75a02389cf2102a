# Build the node image once: a stopped Debian container that every node is cloned from; or
# restore the one destroy kept, or copy another cluster's, when it was built from the same
# definition (IMAGE_DIGEST).
require CLUSTER CLUSTER_DIR IMAGE RELEASE PACKAGES IMAGE_DIGEST KEPT_DIR KEEP_ROOT KEEP_IMAGE MASKED_UNITS PACKAGE_CACHE
dir=$(lxc_dir "$IMAGE")
if lxc_exists "$IMAGE" || [ -d "$dir" ]; then
  lxc_ours "$CLUSTER" "$CLUSTER_DIR" "$IMAGE" || die "LXC container $IMAGE exists and is not this cluster's"
  if [ -f "$dir/gpucluster-image-ready" ]; then
    # containers: added to a running cluster: the image stays as its nodes' lower layer, and
    # Enroot and Pyxis are built for it, for each node to install (containers_addon).
    if [ -n "${CONTAINER_SOURCES_TGZ:-}" ] && [ ! -x "$dir/rootfs/usr/local/bin/enroot" ]; then
      CONTAINER_SOURCES=$(mktemp -d)
      trap 'rm -rf "$CONTAINER_SOURCES"' EXIT
      base64 -d <<< "$CONTAINER_SOURCES_TGZ" | tar -C "$CONTAINER_SOURCES" -xzf -
      build_log="$CLUSTER_DIR/image-build.log"
      rootfs="$dir/rootfs" BUILD_CACHE=$PACKAGE_CACHE containers_addon "$dir" ||
        die "building Enroot and Pyxis for $IMAGE failed: $build_log"
    fi
    exit 0
  fi
  log "removing $IMAGE left half-built by an interrupted run"
  lxc-destroy -n "$IMAGE" -f >&2 || rm -rf "$dir"
fi
# The pending marker first: an interruption before the owner marker is not a foreign image.
lxc_pending_begin "$CLUSTER_DIR" "$IMAGE"
# A build that fails takes its half-built image away: the failed create is not in the stack's
# state, so a destroy after it would never find it (the next create would, and remove it).
built=false
trap '[ "$built" = true ] || { lxc-destroy -n "$IMAGE" -f >/dev/null 2>&1 || rm -rf "$dir"; }' EXIT
kept="$KEPT_DIR/node-image-$IMAGE_DIGEST"
# A kept image past its age is built again: its packages would miss months of updates.
max_age=${KEPT_MAX_AGE_DAYS:-30}
too_old() { [ -n "$(find "$1/gpucluster-image-ready" -mmin +$((max_age * 1440)))" ]; }
if [ -f "$kept/gpucluster-image-ready" ] && too_old "$kept"; then
  log "the node image kept in $kept was built over $max_age days ago (image.kept_max_age_days): building it again"
  rm -rf "$kept"
fi
if [ "$KEEP_IMAGE" = true ] && [ -f "$kept/gpucluster-image-ready" ]; then
  log "restoring the node image kept in $kept"
  mkdir -p "$(dirname "$dir")"
  mv "$kept" "$dir"
  lxc_mark "$CLUSTER" "$CLUSTER_DIR" "$IMAGE"
  built=true
  exit 0
fi
# Another cluster of this host holds the image of the same definition (kept, or in use: its
# rootfs is only read, as its nodes' lower layer): a copy costs seconds where a build costs a
# minute. Markers are written after the copy, so an interrupted one is removed as half-built.
copy_image() {
  local source=$1
  mkdir -p "$dir"
  # The config last, already naming this image's rootfs: a removal of a half-copied image
  # never reaches the source's.
  cp -a --reflink=auto "$source/rootfs" "$dir/" &&
    sed -e "s|^lxc\.rootfs\.path *=.*|lxc.rootfs.path = dir:$dir/rootfs|" \
      -e "s|^lxc\.uts\.name *=.*|lxc.uts.name = $IMAGE|" "$source/config" > "$dir/config.new" &&
    mv "$dir/config.new" "$dir/config"
}
if [ "$KEEP_IMAGE" = true ]; then
  for source in "$KEEP_ROOT"/*/node-image-"$IMAGE_DIGEST" "$KEEP_ROOT"/*/*/node-image-"$IMAGE_DIGEST" \
    "$(dirname "$dir")"/*-image; do
    [ "$source" != "$dir" ] && [ -f "$source/gpucluster-image-ready" ] || continue
    [ "$(cat "$source/gpucluster-image-digest" 2>/dev/null)" = "$IMAGE_DIGEST" ] || continue
    ! too_old "$source" || continue
    started=$SECONDS
    if copy_image "$source"; then
      printf '%s\n' "$IMAGE_DIGEST" > "$dir/gpucluster-image-digest"
      lxc_mark "$CLUSTER" "$CLUSTER_DIR" "$IMAGE"
      touch -r "$source/gpucluster-image-ready" "$dir/gpucluster-image-ready"
      log "node image copied from $source (the same definition) in $((SECONDS - started)) s"
      built=true
      exit 0
    fi
    log "copying the node image from $source failed: building it instead"
    rm -rf "$dir"
    break
  done
fi
# Remember whether the download cache was ours, so destroy removes only what it made (LXC's
# template keeps it in LXC_CACHE_PATH/debian when that is set).
lxc_cache="${LXC_CACHE_PATH:-/var/cache/lxc}/debian"
[ -d "$lxc_cache" ] || printf '%s\n' "$lxc_cache" > "$CLUSTER_DIR/lxc-cache-created"
started=$SECONDS
build_log="$CLUSTER_DIR/image-build.log"
: > "$build_log"
logged "$build_log" lxc-create -n "$IMAGE" -t debian -- -r "$RELEASE"
lxc_mark "$CLUSTER" "$CLUSTER_DIR" "$IMAGE"
log "node image: Debian base (LXC's download cache, or debootstrap into it) in $((SECONDS - started)) s"

rootfs="$dir/rootfs"
# The image's packages, installed from the host's cache of them (PACKAGE_CACHE/RELEASE: the
# .debs and apt's lists, kept with the kept images): a rebuilt image downloads nothing when the
# cache has what it needs and was refreshed within a day, else only what the mirror changed.
# Shared by the clusters of this host: a lock while it is read and written.
started=$SECONDS
cache="$PACKAGE_CACHE/$RELEASE"
use_cache=false
if [ "$KEEP_IMAGE" = true ]; then
  use_cache=true
  mkdir -p "$cache/lists" "$cache/archives"
  (
    flock 9
    cp -a "$cache/lists/." "$rootfs/var/lib/apt/lists/"
    find "$cache/archives" -maxdepth 1 -name '*.deb' -exec cp -t "$rootfs/var/cache/apt/archives/" {} +
  ) 9> "$cache.lock"
fi
# No service starts inside the chroot while packages install (as LXC's template does).
printf '#!/bin/sh\nexit 101\n' > "$rootfs/usr/sbin/policy-rc.d"
chmod 0755 "$rootfs/usr/sbin/policy-rc.d"
mapfile -t packages < <(lines "$PACKAGES")
install=(apt-get install -y -q --no-install-recommends "${packages[@]}")
if [ -n "$(find "$cache/updated" -mmin -1440 2>/dev/null)" ] &&
  chroot "$rootfs" "${install[@]}" --no-download >> "$build_log" 2>&1; then
  log "node image: packages installed from the host's package cache"
else
  logged "$build_log" chroot "$rootfs" apt-get update -q
  logged "$build_log" chroot "$rootfs" "${install[@]}"
  [ "$use_cache" = false ] || touch "$cache/updated"
fi
rm -f "$rootfs/usr/sbin/policy-rc.d"
if [ "$use_cache" = true ]; then
  (
    flock 9
    cp -a "$rootfs/var/lib/apt/lists/." "$cache/lists/"
    # The .debs the cache lacks (a file name is a package version), each appearing whole; not
    # `cp -n`, whose exit status for a skipped file differs between coreutils releases.
    for deb in "$rootfs"/var/cache/apt/archives/*.deb; do
      [ -e "$deb" ] || continue
      kept=$cache/archives/${deb##*/}
      [ -e "$kept" ] || { cp -- "$deb" "$kept.partial" && mv -f -- "$kept.partial" "$kept"; }
    done
  ) 9> "$cache.lock"
fi
# The .debs live in the cache, not in every node's image.
chroot "$rootfs" apt-get clean
log "node image: packages in $((SECONDS - started)) s"
# Jobs in container images (the cluster's `containers:`): Enroot and Pyxis built from their
# sources (lib/containers_build.sh), kept built beside the host's package cache.
if [ -n "${CONTAINER_SOURCES_TGZ:-}" ]; then
  CONTAINER_SOURCES=$(mktemp -d)
  base64 -d <<< "$CONTAINER_SOURCES_TGZ" | tar -C "$CONTAINER_SOURCES" -xzf -
  BUILD_CACHE=$PACKAGE_CACHE containers_build || { rm -rf "$CONTAINER_SOURCES"; die "building Enroot and Pyxis failed: $build_log"; }
  rm -rf "$CONTAINER_SOURCES"
fi
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
# The files every node runs with (lib/node_files.sh), its timer enabled.
into_rootfs() {
  mkdir -p "$rootfs$(dirname "$1")"
  cat > "$rootfs$1"
  chmod "$2" "$rootfs$1"
}
node_files into_rootfs
mkdir -p "$rootfs$(dirname "$NODE_FILES_TIMER_LINK")"
ln -sfn /etc/systemd/system/gpucluster-job-files.timer "$rootfs$NODE_FILES_TIMER_LINK"
# Units a node never uses (MASKED_UNITS) are masked, and their enable links removed.
while read -r unit; do
  [[ $unit =~ ^[A-Za-z0-9:_.@-]+$ ]] || die "MASKED_UNITS: '$unit' is not a unit name"
  ln -sfn /dev/null "$rootfs/etc/systemd/system/$unit"
  rm -f "$rootfs"/etc/systemd/system/*.wants/${unit/@./@*.}
done < <(lines "$MASKED_UNITS")
printf '%s\n' "$IMAGE_DIGEST" > "$dir/gpucluster-image-digest"
touch "$dir/gpucluster-image-ready"
built=true
