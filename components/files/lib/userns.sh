# Unprivileged containers: user namespaces, their rootfs and the host's subordinate ids

# An unprivileged container (the login node): a full copy of the image whose files belong to
# the host ids of its user namespace (its config's lxc.idmap lines), so that its root is a
# host id of no note. The image's files stay the host root's: an overlay clone cannot be one.
# idmap_host_id MAP ID: the host id of container id ID under MAP ("FIRST HOST COUNT" lines);
# fails for an id outside the map.
idmap_host_id() {
  local first host count
  while read -r first host count; do
    [ -n "$count" ] || continue
    if [ "$2" -ge "$first" ] && [ "$2" -lt $((first + count)) ]; then
      echo $((host + $2 - first))
      return 0
    fi
  done <<< "$1"
  return 1
}

# rootfs_shift ROOTFS CONFIG: every file of ROOTFS (a stopped container's own copy) owned by
# the host ids CONFIG's map gives its owner and group; links are changed themselves, never
# followed, and no other filesystem is entered. chown clears setuid and setgid bits: they are
# set again. (File capabilities go: none of the login node's programs needs one.)
rootfs_shift() {
  local rootfs=$1 kind map format id to entry i
  local modes=() paths=()
  while IFS= read -r -d '' entry; do
    modes+=("${entry%% *}")
    paths+=("${entry#* }")
  done < <(find "$rootfs" -xdev ! -type l ! -type d -perm /6000 -printf '%m %p\0')
  for kind in u g; do
    map=$(sed -nE "s/^lxc\.idmap *= *$kind +([0-9]+) +([0-9]+) +([0-9]+) *$/\1 \2 \3/p" <<< "$2")
    [ -n "$map" ] || die "the container's config has no lxc.idmap lines for ${kind}ids"
    format=%U
    [ "$kind" = u ] || format=%G
    for id in $(find "$rootfs" -xdev -printf "$format\n" | sort -nu); do
      to=$(idmap_host_id "$map" "$id") || die "$rootfs: ${kind}id $id has no host id in the container's map"
      [ "$to" != "$id" ] || continue
      if [ "$kind" = u ]; then
        chown -R -h --from="$id" "$to" "$rootfs"
      else
        chown -R -h --from=":$id" ":$to" "$rootfs"
      fi
    done
  done
  for i in "${!paths[@]}"; do chmod "${modes[i]}" "${paths[i]}"; done
}

# lxc_copy_unprivileged IMAGE NAME CONFIG: NAME, a full copy of IMAGE, its files shifted to
# CONFIG's id map.
lxc_copy_unprivileged() {
  local rootfs
  lxc-copy -n "$1" -N "$2" >&2
  rootfs=$(sed -nE 's/^lxc\.rootfs\.path *= *(dir:)?(\/.+)$/\2/p' "$(lxc_dir "$2")/config" | tail -n1)
  [ -d "$rootfs" ] || die "$2: no rootfs directory after its copy ($rootfs)"
  rootfs_shift "$rootfs" "$3"
  # Its root opens the rootfs through the container's directory (0770 root as LXC makes it).
  chmod 0711 "$(lxc_dir "$2")"
}

# The host's /etc/subuid and /etc/subgid reserve an unprivileged container's host ids for root:
# LXC maps ids through newuidmap where the host has it (package uidmap), which allows root only
# what those files give it, and useradd then hands nobody else those ids. Each container's
# lines are recorded (SUBIDS_DIR/CONTAINER), so exactly they are taken out again; a line that
# someone else also has (a person's id kept in two clusters' login nodes) stays with them.
SUBIDS_DIR=/var/lib/gpucluster-host/subids

# subid_lines CONFIG: "u root:FIRST:COUNT" / "g ..." for each of CONFIG's lxc.idmap lines.
subid_lines() {
  sed -nE 's/^lxc\.idmap *= *([ug]) +[0-9]+ +([0-9]+) +([0-9]+) *$/\1 root:\2:\3/p' <<< "$1"
}

# _subids_set CONTAINER LINES: the container's lines in place of those recorded for it.
_subids_set() {
  local record=$SUBIDS_DIR/$1 wanted=$2 old="" kind file tmp
  [ ! -f "$record" ] || old=$(< "$record")
  for kind in u g; do
    file=${SUBID_ETC:-/etc}/sub${kind}id
    [ -f "$file" ] || [ -n "$(grep "^$kind " <<< "$wanted")" ] || continue
    tmp=$(mktemp "$file.XXXXXX")
    # Every line of the file but one of each recorded for the container, then the wanted ones.
    { [ ! -f "$file" ] || awk -v drop="$(sed -n "s/^$kind //p" <<< "$old")" '
        BEGIN { n = split(drop, lines, "\n"); for (i = 1; i <= n; i++) if (lines[i] != "") left[lines[i]]++ }
        ($0 in left) && left[$0] > 0 { left[$0]--; next }
        { print }' "$file"
      sed -n "s/^$kind //p" <<< "$wanted"; } > "$tmp"
    chmod 0644 "$tmp"
    if [ -f "$file" ] && cmp -s "$tmp" "$file"; then rm -f "$tmp"; else mv -f "$tmp" "$file"; fi
  done
  if [ -n "$wanted" ]; then
    printf '%s\n' "$wanted" > "$record"
  else
    rm -f "$record"
  fi
}

# subids_claim CONTAINER CONFIG / subids_release CONTAINER: under the lock of SUBIDS_DIR.
subids_claim() { with_dir_lock "$SUBIDS_DIR" _subids_set "$1" "$(subid_lines "$2")"; }
subids_release() {
  [ -f "$SUBIDS_DIR/$1" ] || return 0
  with_dir_lock "$SUBIDS_DIR" _subids_set "$1" ""
  # The last record gone, its directory goes (and the host's, when empty).
  [ -n "$(ls -A "$SUBIDS_DIR" | grep -v '^lock$' || true)" ] || rm -rf "$SUBIDS_DIR"
  rmdir "$(dirname "$SUBIDS_DIR")" 2>/dev/null || true
}
