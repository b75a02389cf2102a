# Remove the stand-in GPUs: only character devices with NVIDIA's major 195 in the cluster's
# private device directory, then the directory when nothing else is in it.
require CLUSTER DEVICE_DIR
[ "$DEVICE_DIR" = "/run/gpucluster-$CLUSTER-dev" ] ||
  die "stand-in GPUs live only in the cluster's device directory /run/gpucluster-$CLUSTER-dev, not $DEVICE_DIR"
for path in "$DEVICE_DIR"/nvidia[0-9]* "$DEVICE_DIR"/nvidiactl; do
  if [ -c "$path" ] && [ "$(stat -c %t "$path")" = c3 ]; then
    rm -f "$path"
  fi
done
if [ -d "$DEVICE_DIR" ]; then
  rmdir "$DEVICE_DIR" 2>/dev/null || log "kept $DEVICE_DIR: it holds files that are not stand-in GPUs"
fi
