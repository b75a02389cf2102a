# Remove the stand-in GPUs: only character devices with NVIDIA's major 195 in the cluster's
# private device directory, then the directory when nothing else is in it.
require CLUSTER DEVICE_DIR
# (A host with its own run_dir has it there: RUN_DIR/gpucluster-CLUSTER-dev.)
[[ "$DEVICE_DIR" == /*/gpucluster-$CLUSTER-dev && "$DEVICE_DIR" != /dev/* && "$DEVICE_DIR" != *..* ]] ||
  die "stand-in GPUs live only in the cluster's device directory /run/gpucluster-$CLUSTER-dev" \
    "(or the host's RUN_DIR/gpucluster-$CLUSTER-dev), not $DEVICE_DIR"
for path in "$DEVICE_DIR"/nvidia[0-9]* "$DEVICE_DIR"/nvidiactl; do
  if [ -c "$path" ] && [ "$(stat -c %t "$path")" = c3 ]; then
    rm -f "$path"
  fi
done
if [ -d "$DEVICE_DIR" ]; then
  rmdir "$DEVICE_DIR" 2>/dev/null || log "kept $DEVICE_DIR: it holds files that are not stand-in GPUs"
fi
