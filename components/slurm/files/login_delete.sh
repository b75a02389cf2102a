# The login node's sshd and munge stopped before its container goes. The people's directories
# in shared_dir that the create made (SHARED_DIRS_MADE, on the host) go when empty; one holding
# files stays (theirs). The old copy of a setup replaced with its container (deleted after the
# new one made its own) leaves the directories and their record to the new one.
# Succeeds when the container is gone.
require CONTAINER SHARED_DIR SHARED_DIRS_MADE
created_in_this_clone "$CONTAINER" || exit 0
lxc_exists "$CONTAINER" && lxc_running "$CONTAINER" || exit 0
in_ct "$CONTAINER" systemctl disable --now --quiet ssh munge || true
if [ -s "$SHARED_DIRS_MADE" ]; then
  mapfile -t made < <(sort -u "$SHARED_DIRS_MADE")
  in_ct "$CONTAINER" /bin/sh -c '
    shared=$1; shift
    for name; do
      rmdir "$shared/$name" 2>/dev/null || [ ! -d "$shared/$name" ] || echo "keeping $shared/$name: it is not empty" >&2
    done' sh "$SHARED_DIR" "${made[@]}" || true
fi
rm -f "$SHARED_DIRS_MADE"
rmdir "$(dirname "$SHARED_DIRS_MADE")" 2>/dev/null || true
