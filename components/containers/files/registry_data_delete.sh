# Destroy, or the registry removed: its data directory moves to the kept directory (unless
# keep_images is false), where a new registry of the cluster takes it up; else it goes.
require DATA_DIR KEPT_DIR KEEP_IMAGES
[ -d "$DATA_DIR" ] || exit 0
if [ "$KEEP_IMAGES" = yes ]; then
  mkdir -p "$(dirname "$KEPT_DIR")"
  rm -rf --one-file-system "$KEPT_DIR"
  mv "$DATA_DIR" "$KEPT_DIR"
  log "kept the registry's images and CA at $KEPT_DIR (a new registry of the cluster takes them up; ./purge-kept.sh removes them)"
else
  rm -rf --one-file-system "$DATA_DIR"
fi
