# The login node's sshd and munge stopped before its container goes. The people's directories
# in shared_dir that the create made (SHARED_DIRS_MADE, on the host) go when empty; one holding
# files stays (theirs). The old copy of a setup replaced with its container (deleted after the
# new one made its own) leaves the directories and their record to the new one.
# Succeeds when the container is gone.
require CONTAINER SHARED_DIR SHARED_DIRS_MADE
created_in_this_clone "$CONTAINER" || exit 0
if lxc_exists "$CONTAINER" && lxc_running "$CONTAINER"; then
  in_ct "$CONTAINER" systemctl disable --now --quiet ssh munge || true
fi
# On the host, as the create made them (rmdir removes no link and nothing through one).
if [ -s "$SHARED_DIRS_MADE" ]; then
  while IFS= read -r name; do
    [ -n "$name" ] || continue
    rmdir -- "$SHARED_DIR/$name" 2>/dev/null || [ ! -d "$SHARED_DIR/$name" ] || echo "keeping $SHARED_DIR/$name: it is not empty" >&2
  done < <(sort -u "$SHARED_DIRS_MADE")
fi
rm -f "$SHARED_DIRS_MADE"
rmdir "$(dirname "$SHARED_DIRS_MADE")" 2>/dev/null || true
