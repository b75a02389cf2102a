# The stack's registry's home on the host: its data directory, root's only (0700), and in it
# the store bound into the registry's container (images, the CA and TLS key, the push
# account), whose owners are the container's. One kept by an earlier destroy of the cluster
# (keep_images) is taken up: the same images, the same CA.
require DATA_DIR STORE KEPT_DIR
if [ ! -d "$DATA_DIR" ] && [ -d "$KEPT_DIR" ]; then
  mkdir -p "$(dirname "$DATA_DIR")"
  mv "$KEPT_DIR" "$DATA_DIR"
  rmdir "$(dirname "$KEPT_DIR")" 2>/dev/null || true
  log "took up the registry kept at $KEPT_DIR (its images and CA)"
fi
mkdir -p "$DATA_DIR"
chmod 0700 "$DATA_DIR"
mkdir -p "$STORE"
