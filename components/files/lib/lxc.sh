# LXC containers: the lxc-* commands under the cluster's LXC path, ownership markers, and
# commands inside a container.
# A host may keep the cluster's containers under an LXC path of its own (LXC_PATH, set by the
# command or the host state file): every lxc-* command then gets `-P LXC_PATH`.
lxc_dir() { printf '%s/%s' "${LXC_PATH:-/var/lib/lxc}" "$1"; }
lxc-attach() { command lxc-attach ${LXC_PATH:+-P "$LXC_PATH"} "$@"; }
lxc-cgroup() { command lxc-cgroup ${LXC_PATH:+-P "$LXC_PATH"} "$@"; }
lxc-copy() { command lxc-copy ${LXC_PATH:+-P "$LXC_PATH"} "$@"; }
lxc-create() { command lxc-create ${LXC_PATH:+-P "$LXC_PATH"} "$@"; }
lxc-destroy() { command lxc-destroy ${LXC_PATH:+-P "$LXC_PATH"} "$@"; }
lxc-info() { command lxc-info ${LXC_PATH:+-P "$LXC_PATH"} "$@"; }
# lxc-start -n NAME ...: first the empty cgroups a start cut short (a crash, a killed run) left
# under the container's fixed cgroup names (lxc.cgroup.dir.monitor and .container): LXC does
# not reuse them, and the container would fail to start ("ABORTING") from then on.
lxc-start() {
  local args=("$@") i
  for ((i = 0; i + 1 < ${#args[@]}; i++)); do
    [ "${args[i]}" != -n ] || clear_stale_cgroups "${args[i + 1]}"
  done
  # The container's monitor belongs to no deploy: killed, it takes the container with it.
  detached lxc-start ${LXC_PATH:+-P "$LXC_PATH"} "$@"
}
lxc-stop() { command lxc-stop ${LXC_PATH:+-P "$LXC_PATH"} "$@"; }
lxc-wait() { command lxc-wait ${LXC_PATH:+-P "$LXC_PATH"} "$@"; }
lxc_exists() { [ -f "$(lxc_dir "$1")/config" ]; }
# The owner marker's line, read by bash (no cat: each node's create reads every container's).
lxc_owner() {
  local owner=""
  { IFS= read -r owner || [ -n "$owner" ]; } 2>/dev/null < "$(lxc_dir "$1")/gpucluster-owner" || true
  [ -z "$owner" ] || printf '%s\n' "$owner"
}

# A container is marked as the cluster's right after it is made. A create interrupted before
# that leaves an unmarked container; the pending marker, written before the container is
# made, says it is ours: `lxc_pending CLUSTER_DIR NAME`. Clones must also sit on our image.
lxc_pending_marker() { printf '%s/pending/%s' "$1" "$2"; }
lxc_pending() { [ -f "$(lxc_pending_marker "$1" "$2")" ] && [ -z "$(lxc_owner "$2")" ]; }

# lxc_pending_begin CLUSTER_DIR NAME: write the pending marker. The directory stays while
# containers are made (many at once): only the deletes remove it, when it is empty.
lxc_pending_begin() {
  mkdir -p "$1/pending"
  touch "$(lxc_pending_marker "$1" "$2")"
}
lxc_on_image() { grep -qsE "^lxc\.rootfs\.path *= *overlay(fs)?:$(lxc_dir "$2")/rootfs:" "$(lxc_dir "$1")/config"; }
# lxc_own_copy NAME: the container's rootfs is its own directory (an unprivileged full copy).
lxc_own_copy() { grep -qsE "^lxc\.rootfs\.path *= *(dir:)?$(lxc_dir "$1")/rootfs$" "$(lxc_dir "$1")/config"; }

# lxc_ours CLUSTER CLUSTER_DIR NAME [IMAGE]: the container is this cluster's: marked, or a
# half-made one this cluster was making (for a clone: an overlay of the cluster's image).
lxc_ours() {
  local cluster=$1 cluster_dir=$2 name=$3 image=${4-}
  [ "$(lxc_owner "$name")" = "$cluster" ] && return 0
  lxc_pending "$cluster_dir" "$name" || return 1
  [ -z "$image" ] || [ ! -f "$(lxc_dir "$name")/config" ] || lxc_on_image "$name" "$image" || lxc_own_copy "$name"
}

# lxc_mark CLUSTER CLUSTER_DIR NAME: the owner marker, then the pending marker goes (not its
# directory: another create may be writing its marker there at this moment).
lxc_mark() {
  echo "$1" > "$(lxc_dir "$3")/gpucluster-owner"
  rm -f "$(lxc_pending_marker "$2" "$3")"
}
lxc_running() { [ "$(lxc-info -n "$1" -sH 2>/dev/null)" = RUNNING ]; }

# clear_stale_cgroups NAME: a stopped container's monitor and payload cgroups (v1 and v2),
# removed where empty; rmdir never removes a cgroup with a process in it.
# Whether it runs (lxc-info) is asked only when there is such a cgroup: a fresh clone has none.
clear_stale_cgroups() {
  local dir checked=0
  for dir in /sys/fs/cgroup/lxc.monitor."$1" /sys/fs/cgroup/lxc.payload."$1" \
    /sys/fs/cgroup/*/lxc.monitor."$1" /sys/fs/cgroup/*/lxc.payload."$1"; do
    [ -d "$dir" ] || continue
    if [ "$checked" = 0 ]; then
      ! lxc_running "$1" || return 0
      checked=1
    fi
    find "$dir" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  done
}

# in_ct CONTAINER COMMAND...: run a command in a container with a clean environment. Nodes
# run systemd: systemctl skips the packages' SysV scripts (syncing them runs update-rc.d, a
# perl script, seconds of CPU when many nodes enable a unit at once).
in_ct() {
  local name=$1; shift
  lxc-attach -n "$name" --clear-env -v LC_ALL=C -v SYSTEMCTL_SKIP_SYSV=1 \
    -v PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin -- "$@"
}

# ct_write_if_changed CONTAINER PATH MODE OWNER: stdin to PATH in the container;
# exit status 0 when the content changed. Paths are passed as arguments, never as shell text.
ct_write_if_changed() {
  local name=$1 path=$2 mode=$3 owner=$4
  in_ct "$name" /bin/sh -c '
    set -e; path=$1; mode=$2; owner=$3
    mkdir -p "$(dirname "$path")"
    tmp=$(mktemp "$path.XXXXXX")
    cat > "$tmp"; chown "$owner" "$tmp"; chmod "$mode" "$tmp"
    if [ -f "$path" ] && cmp -s "$tmp" "$path"; then rm -f "$tmp"; exit 1; fi
    mv -f "$tmp" "$path"' sh "$path" "$mode" "$owner"
}

# lxc_overlay_dir CONTAINER: the writable layer of an overlay clone (nothing for another rootfs).
lxc_overlay_dir() { sed -nE 's/^lxc\.rootfs\.path *= *overlay(fs)?:[^:]+:(.+)$/\2/p' "$(lxc_dir "$1")/config" | tail -n1; }

# name_stopped_clone CONTAINER HOSTNAME: a stopped overlay clone named HOSTNAME before it starts
# (LXC sets its UTS name; systemd would set the one /etc/hostname holds): /etc/hostname and
# /etc/hosts' 127.0.1.1 line, written into the overlay's writable layer, which the container
# sees as its own. Fails, changing nothing, for a container that is no overlay clone.
name_stopped_clone() {
  local name=$1 hostname=$2 dir upper lower hosts
  dir=$(lxc_dir "$name")
  upper=$(lxc_overlay_dir "$name")
  lower=$(sed -nE 's/^lxc\.rootfs\.path *= *overlay(fs)?:([^:]+):.+$/\2/p' "$dir/config" | tail -n1)
  [ -n "$upper" ] && [ -d "$upper" ] && [ -d "$lower" ] || return 1
  mkdir -p "$upper/etc"
  printf '%s\n' "$hostname" > "$upper/etc/hostname"
  hosts=$upper/etc/hosts
  [ -e "$hosts" ] || hosts=$lower/etc/hosts
  sed "s/^127\.0\.1\.1[[:space:]].*/127.0.1.1\t$hostname/" "$hosts" > "$upper/etc/hosts.new"
  chmod 0644 "$upper/etc/hostname" "$upper/etc/hosts.new"
  mv -f "$upper/etc/hosts.new" "$upper/etc/hosts"
}

# Several files into a container with one lxc-attach (each attach is a process tree on the
# host and a process in the container: a dozen per node cost tenths of a CPU second per node). The files are staged in a host directory, then copied in one tar stream.
# ct_stage STAGE PATH MODE OWNER: stdin is to be PATH in the container.
# ct_stage_absent STAGE PATH: PATH is to be removed from the container.
ct_stage() {
  local stage=$1 index
  index=$(($(ct_staged_count "$stage") + 1))
  cat > "$stage/$index"
  printf '%s %s %s %s\n' "$index" "$3" "$4" "$2" >> "$stage/manifest"
}
ct_stage_absent() { printf '%s - - %s\n' "$(($(ct_staged_count "$1") + 1))" "$2" >> "$1/manifest"; }
# The entries staged so far (0 before the first: no manifest yet, and no message saying so).
ct_staged_count() {
  local entries=()
  [ ! -f "$1/manifest" ] || mapfile -t entries < "$1/manifest"
  echo "${#entries[@]}"
}

# ct_install_staged CONTAINER STAGE: the staged files into the container, each written only
# when its content differs (atomically, with its mode and owner); prints the paths it changed
# or removed, one a line. Paths are data read inside the container, never shell text.
ct_install_staged() {
  tar -C "$2" -cf - . | in_ct "$1" /bin/sh -c '
    set -e; stage=$(mktemp -d); trap "rm -rf \"\$stage\"" EXIT
    tar -C "$stage" -xf -
    while read -r index mode owner path; do
      if [ "$mode" = - ]; then
        if [ -e "$path" ] || [ -L "$path" ]; then rm -f "$path"; echo "$path"; fi
        continue
      fi
      if [ -f "$path" ] && cmp -s "$stage/$index" "$path"; then continue; fi
      mkdir -p "$(dirname "$path")"
      tmp=$(mktemp "$path.XXXXXX")
      cat "$stage/$index" > "$tmp"; chown "$owner" "$tmp"; chmod "$mode" "$tmp"
      mv -f "$tmp" "$path"; echo "$path"
    done < "$stage/manifest"'
}

# systemd_ready CONTAINER: the container's boot has finished (running, or degraded). One
# attach that waits for the end of the boot, not one every poll: with many containers booting
# at once, polling attaches take CPU from their boots. Fails while systemd is not answering yet.
systemd_ready() {
  local state
  state=$(in_ct "$1" timeout 60 systemctl is-system-running --wait 2>/dev/null) || true
  [ "$state" = running ] || [ "$state" = degraded ]
}

# The identity of a container's clone: a random id kept in its LXC directory, made on first use.
# A container replaced by a new clone of the same name has another one.
# Made once, atomically (container_create.sh makes it with the clone): a new id is written
# to a file of its own and linked to the name, so of creates racing in a fresh clone the
# first link wins and every one of them reads back that id.
clone_id() {
  local dir file new
  dir=$(lxc_dir "$1")
  file=$dir/gpucluster-clone-id
  [ -d "$dir" ] || return 1
  if [ ! -s "$file" ]; then
    new=$(mktemp "$dir/.gpucluster-clone-id.XXXXXX")
    cat /proc/sys/kernel/random/uuid > "$new"
    # An empty file (an interrupted write of an earlier release) is replaced.
    ln "$new" "$file" 2>/dev/null || [ -s "$file" ] || mv -f "$new" "$file"
    rm -f "$new"
  fi
  # Read by bash, not cat: every command living in a node reads it.
  IFS= read -r new < "$file" || [ -n "$new" ]
  printf '%s\n' "$new"
}

# A create of something set up inside CONTAINER reports the clone it was made in (`clone=ID`).
report_clone() { echo "clone=$(clone_id "$1")"; }

# False when the command was created in another clone of CONTAINER than the one there now. The
# engine deletes the old copy of a command replaced along with its container only after the new
# copy exists, in the new clone of the same name: that delete must leave the new clone alone.
# A create of an earlier release reported nothing: then it is the same clone, as before.
created_in_this_clone() {
  local created
  created=$(printf '%s\n' "${PULUMI_COMMAND_STDOUT:-}" | sed -n 's/^clone=//p' | tail -n 1)
  [ -z "$created" ] || [ "$created" = "$(clone_id "$1" 2>/dev/null)" ]
}
