# Build NVIDIA Enroot and Pyxis offline from the pinned sources (CONTAINER_SOURCES, copies of
# third_party/enroot-v4.1.2 and pyxis-v0.24.0) and install them into the node image's rootfs.
# containers_build, by image_create.sh after the image's packages are installed, with rootfs,
# CONTAINER_SOURCES, BUILD_CACHE and build_log set.
#
# The compilers and -dev packages go into a throwaway copy of the rootfs, never into the image;
# only the installed files are copied back. The result is kept in BUILD_CACHE under a key of the
# release, the architecture, the image's Slurm version (Pyxis must be built against the very
# Slurm it is loaded by, else slurmd refuses it: "Incompatible plugin version") and the sources'
# digest, so the next image of the same key copies it in seconds.
#
# What Enroot needs at run time is in the image's package list (components/lxc/node_image.py,
# CONTAINER_RUNTIME_PACKAGES); the helpers link libbsd statically, as upstream does.

ENROOT_VERSION=4.1.2
PYXIS_VERSION=0.24.0
# Bump when the build below changes what it produces: the cache key includes it.
CONTAINERS_RECIPE=3

# containers_build: the built files (containers_tree) installed into the image's rootfs.
containers_build() {
  local cache
  cache=$(containers_tree) || return 1
  containers_install_rootfs "$cache"
}

# containers_tree: builds Enroot and Pyxis for the Slurm of $rootfs, or finds them in the build
# cache, and prints the cache entry (its root/ holds the installed files, files lists them).
# $rootfs is only read (and copied to build in). In a subshell, so that its traps and
# variables stay out of the caller.
containers_tree() { (
  : "${rootfs:?}" "${CONTAINER_SOURCES:?}" "${BUILD_CACHE:?}" "${build_log:?}"
  local enroot_src="$CONTAINER_SOURCES/enroot-v$ENROOT_VERSION"
  local pyxis_src="$CONTAINER_SOURCES/pyxis-v$PYXIS_VERSION"
  local release arch slurm digest key cache plugin_dir
  [ -f "$enroot_src/Makefile" ] || die "Enroot sources missing: $enroot_src/Makefile"
  [ -f "$pyxis_src/Makefile" ] || die "Pyxis sources missing: $pyxis_src/Makefile"

  release=$(sed -n 's/^VERSION_CODENAME=//p' "$rootfs/etc/os-release" | tr -d '"')
  [ -n "$release" ] || die "no VERSION_CODENAME in $rootfs/etc/os-release"
  arch=$(chroot "$rootfs" dpkg --print-architecture)
  # The version of the Slurm the image runs (slurm-client and libslurm come from one source).
  slurm=$(dpkg-query --admindir="$rootfs/var/lib/dpkg" -W -f='${Version}' slurm-client 2>/dev/null) ||
    die "slurm-client is not installed in $rootfs: Pyxis is built against the image's Slurm"
  # Slurm's plugins directory (PluginDir, where slurmd looks for a plugstack's relative
  # names): the one holding its auth plugin.
  plugin_dir=$(find "$rootfs/usr/lib" -name auth_munge.so -printf '%h\n' -quit)
  [ -n "$plugin_dir" ] || die "Slurm's plugin directory (auth_munge.so) not found in $rootfs/usr/lib"
  plugin_dir=${plugin_dir#"$rootfs"}
  digest=$(cd "$CONTAINER_SOURCES" &&
    find "enroot-v$ENROOT_VERSION" "pyxis-v$PYXIS_VERSION" -type f -print0 | LC_ALL=C sort -z |
    xargs -0 sha256sum | sha256sum | cut -c1-16)
  key="$release-$arch-slurm-${slurm//[^A-Za-z0-9.+_-]/_}-src-$digest-r$CONTAINERS_RECIPE"
  cache="$BUILD_CACHE/containers/$key"
  mkdir -p "$BUILD_CACHE/containers"
  # Build roots a killed run left (its trap never ran); a day old, so never a running build's.
  find "$BUILD_CACHE/containers" -mindepth 1 -maxdepth 1 -name '.build.*' -mmin +1440 \
    -exec rm -rf --one-file-system {} +

  # One build per key at a time: two clusters' images built at once wait for the first's.
  exec 8> "$cache.lock"
  flock 8
  if [ -f "$cache/complete" ]; then
    log "node image: Enroot $ENROOT_VERSION and Pyxis $PYXIS_VERSION from the build cache ($key)"
  else
    containers_compile "$cache" "$key" "$plugin_dir" "$slurm" "$enroot_src" "$pyxis_src" >&2
  fi
  printf '%s\n' "$cache"
); }

# containers_install_rootfs CACHE: the built files into $rootfs (existing directories of the
# image keep their owners, modes and times), the helpers given their capabilities.
containers_install_rootfs() {
  local cache=$1
  tar -C "$cache/root" -cf - . |
    tar -C "$rootfs" -xf - --no-overwrite-dir --keep-directory-symlink
  chroot "$rootfs" /bin/sh -c "$CONTAINERS_SETCAP"
  log "node image: Enroot $ENROOT_VERSION and Pyxis $PYXIS_VERSION installed:" \
    "enroot in /usr/local/bin, its config and hooks in /etc/enroot, Pyxis in Slurm's plugin directory"
  sed 's/^/  /' "$cache/files" >> "$build_log"
}

# containers_addon DIR: for an image built without them, the built files as
# DIR/CONTAINERS_ADDON, which its running nodes install (lib/containers_addon.sh).
containers_addon() {
  local dir=$1 cache
  [ ! -f "$dir/$CONTAINERS_ADDON" ] || return 0
  cache=$(containers_tree) || return 1
  tar -C "$cache/root" -cf "$dir/$CONTAINERS_ADDON.new" . && mv -f "$dir/$CONTAINERS_ADDON.new" "$dir/$CONTAINERS_ADDON"
  log "node image $(basename "$dir"): Enroot $ENROOT_VERSION and Pyxis $PYXIS_VERSION ready for its running nodes ($dir/$CONTAINERS_ADDON)"
}

# containers_compile CACHE KEY PLUGIN_DIR SLURM_VERSION ENROOT_SRC PYXIS_SRC: build both in a
# throwaway copy of the rootfs and store the installed files as CACHE/root.
containers_compile() {
  local cache=$1 key=$2 plugin_dir=$3 slurm=$4 enroot_src=$5 pyxis_src=$6
  local tmp buildroot stage started=$SECONDS
  local -a install
  tmp=$(mktemp -d "$BUILD_CACHE/containers/.build.XXXXXX")
  buildroot="$tmp/buildroot"
  # Nothing is mounted in the build root (gcc, make and apt-get need no /proc), so removing it
  # can never reach the host's files; --one-file-system all the same.
  # shellcheck disable=SC2064 # the path now: tmp is local, gone when the trap runs
  trap "rm -rf --one-file-system '$tmp'" EXIT
  trap 'exit 130' INT TERM HUP
  log "node image: building Enroot $ENROOT_VERSION and Pyxis $PYXIS_VERSION ($key)"
  cp -a --reflink=auto "$rootfs" "$buildroot"
  printf '#!/bin/sh\nexit 101\n' > "$buildroot/usr/sbin/policy-rc.d"
  chmod 0755 "$buildroot/usr/sbin/policy-rc.d"
  # libslurm-dev of exactly the image's Slurm (/usr/include/slurm/spank.h in both releases);
  # libbsd-dev and linux-libc-dev stand in for Enroot's empty deps/ submodules; makeself gives
  # the enroot-makeself script (`enroot bundle`).
  install=(env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends
    gcc make libc6-dev libbsd-dev linux-libc-dev makeself "libslurm-dev=$slurm")
  if ! chroot "$buildroot" "${install[@]}" >> "$build_log" 2>&1; then
    logged "$build_log" chroot "$buildroot" apt-get update -q
    logged "$build_log" chroot "$buildroot" "${install[@]}"
  fi

  # The sources are read-only (third_party): writable copies to build in.
  mkdir -p "$buildroot/build"
  cp -R "$enroot_src" "$buildroot/build/enroot"
  cp -R "$pyxis_src" "$buildroot/build/pyxis"
  chmod -R u+w "$buildroot/build"
  # The one change to Enroot's sources, in the request that proves a registry's Basic account:
  # it finds the credentials curl sent in curl's verbose output by a case-sensitive
  # "Authorization: Basic", which curl 7.88 (Debian 12) prints in lower case over HTTP/2
  # (docker-registry with TLS) and curl 8 also in its HTTP/2 trace, so a registry with Basic
  # accounts (htpasswd) never let anyone pull; and the same pipe swallowed the error of that
  # request (a missing image's 404, a wrong password's 401): the job failed without a reason.
  # The request's own header line is matched whatever the case; errors go on to stderr.
  local docker_sh="$buildroot/build/enroot/src/docker.sh" text
  local old_awk='/Authorization: Basic/ { sub(/\r/, "", $4); print $4 }'
  local new_awk='tolower($0) ~ /^> authorization: basic / { sub(/\r/, "", $4); print $4 } /\[ERROR\]|^curl: / { print > "/dev/stderr" }'
  text=$(cat "$docker_sh")
  [[ $text == *"$old_awk"* ]] ||
    die "Enroot's src/docker.sh has no Basic credentials match to fix (other sources than $ENROOT_VERSION?)"
  printf '%s\n' "${text/"$old_awk"/"$new_awk"}" > "$docker_sh"

  # Enroot: its helpers against glibc (FORCE_GLIBC, not the musl submodule) and Debian's
  # headers; `-o deps` skips the submodule build (musl, makeself, linux-headers are empty),
  # -l:libbsd.a then comes from libbsd-dev. Built without DESTDIR first: `enroot` and
  # enroot.conf embed their paths at build time, and DESTDIR's would end up in them.
  # glibc < 2.38 (Debian 12) declares no strlcpy/strlcat: libbsd's header does, else they are
  # implicit (int, not size_t) and gcc warns. Through the environment: the Makefile appends it.
  local cppflags=
  grep -qw strlcpy "$buildroot/usr/include/string.h" ||
    cppflags="-D_GNU_SOURCE= -include bsd/string.h" # _GNU_SOURCE as the sources define it
  local -a enroot_make=(env "CPPFLAGS=$cppflags" make -C /build/enroot -o deps FORCE_GLIBC=1
    prefix=/usr/local sysconfdir=/etc)
  install -D -m 0755 "$buildroot/usr/bin/makeself" \
    "$buildroot/build/enroot/deps/dist/makeself/bin/enroot-makeself"
  logged "$build_log" chroot "$buildroot" "${enroot_make[@]}" all
  logged "$build_log" chroot "$buildroot" "${enroot_make[@]}" DESTDIR=/stage install
  stage="$buildroot/stage"
  # 98-nvidia.sh calls nvidia-container-cli (libnvidia-container), which the image lacks: active,
  # it would fail every start of a GPU image (NVIDIA_VISIBLE_DEVICES set). Kept, inactive, with
  # upstream's optional hooks in share/enroot/hooks.d (copy it to /etc/enroot/hooks.d to enable).
  mv "$stage/etc/enroot/hooks.d/98-nvidia.sh" "$stage/usr/local/share/enroot/hooks.d/"

  # Pyxis: only the plugin goes in; the plugstack config is written elsewhere.
  logged "$build_log" chroot "$buildroot" make -C /build/pyxis
  install -D -m 0644 "$buildroot/build/pyxis/spank_pyxis.so" "$stage$plugin_dir/spank_pyxis.so"

  # DESTDIR must not be in them (enroot and enroot.conf embed their paths).
  ! grep -rlF /stage/ "$stage" >&2 || die "the staging path leaked into the installed files above"
  mkdir "$tmp/result"
  mv "$stage" "$tmp/result/root"
  (cd "$tmp/result/root" && find . ! -type d | sed 's|^\.||' | LC_ALL=C sort) > "$tmp/result/files"
  touch "$tmp/result/complete"
  rm -rf "$cache"
  mv "$tmp/result" "$cache"
  rm -rf --one-file-system "$tmp"
  trap - EXIT
  log "node image: Enroot and Pyxis built in $((SECONDS - started)) s"
}

