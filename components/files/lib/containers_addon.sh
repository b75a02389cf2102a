# Enroot and Pyxis in a running container whose node image was built without them: the
# cluster's `containers:` added to a running cluster, or the upgrade that turned them on. The
# image's create builds them for it (containers_addon, lib/containers_build.sh) as
# IMAGE_DIR/CONTAINERS_ADDON; each node and the login node install that in place, their jobs
# and sessions running on. The image itself is the lower layer of the running nodes: it is
# never changed under them.
CONTAINERS_ADDON=gpucluster-containers.tar

# The two helpers that turn image layers into a squashfs get the capabilities they use for
# overlay whiteouts and xattrs, as NVIDIA's enroot+caps package gives them: without them no
# person can import an image (`enroot-aufs2ovlfs: failed to set capabilities`). Each drops
# every other capability at start. Run in the image's chroot, or in a running node.
CONTAINERS_SETCAP='setcap cap_sys_admin+pe /usr/local/bin/enroot-mksquashovlfs &&
  setcap cap_sys_admin,cap_mknod+pe /usr/local/bin/enroot-aufs2ovlfs'

# ct_install_containers CONTAINER IMAGE [PACKAGES]: Enroot and Pyxis into the running
# CONTAINER, from IMAGE's build of them, unless it has them. With PACKAGES (Enroot's run-time
# needs, one a line: a node, where containers run) those first, then the helpers' capabilities;
# without (the login node: Pyxis in srun and sbatch) the files only.
ct_install_containers() {
  local name=$1 image=$2 packages=${3:-} addon
  local -a wanted install
  ! in_ct "$name" test -x /usr/local/bin/enroot || return 0
  addon="$(lxc_dir "$image")/$CONTAINERS_ADDON"
  [ -f "$addon" ] || die "$name has no Enroot, and its image $image no build of it ($addon): run pulumi up again"
  log "$name: its node image predates containers: installing Enroot and Pyxis in the running container"
  if [ -n "$packages" ]; then
    mapfile -t wanted < <(lines "$packages")
    install=(env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${wanted[@]}")
    # The image's package lists first; the mirror's current ones when they have gone stale.
    if ! in_ct "$name" "${install[@]}" > /dev/null 2>&1; then
      in_ct "$name" env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
      in_ct "$name" "${install[@]}" >&2
    fi
  fi
  in_ct "$name" tar -C / -xf - --no-overwrite-dir --keep-directory-symlink < "$addon"
  [ -z "$packages" ] || in_ct "$name" /bin/sh -c "$CONTAINERS_SETCAP"
}
