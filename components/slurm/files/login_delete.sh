# The login node's sshd and munge stopped before its container goes. The people's directories
# in shared_dir that the create made go when empty; one holding files stays (theirs).
# Succeeds when the container is gone.
require CONTAINER SHARED_DIR
created_in_this_clone "$CONTAINER" || exit 0
lxc_exists "$CONTAINER" && lxc_running "$CONTAINER" || exit 0
in_ct "$CONTAINER" systemctl disable --now --quiet ssh munge || true
in_ct "$CONTAINER" /bin/sh -c '
  [ -f /etc/gpucluster/shared-dirs-made ] || exit 0
  while read -r name; do
    rmdir "$1/$name" 2>/dev/null || [ ! -d "$1/$name" ] || echo "keeping $1/$name: it is not empty" >&2
  done < /etc/gpucluster/shared-dirs-made
  rm -f /etc/gpucluster/shared-dirs-made' sh "$SHARED_DIR" || true
