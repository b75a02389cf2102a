# Stand-in GPUs for a machine without one (gpu.stand_in): character devices with NVIDIA's
# major 195, only ever in the cluster's private device directory, never under /dev. Refused,
# before anything changes, where a real NVIDIA driver is loaded.
require CLUSTER DEVICE_DIR GPU_COUNT
# (A host with its own run_dir has it there: RUN_DIR/gpucluster-CLUSTER-dev.)
[[ "$DEVICE_DIR" == /*/gpucluster-$CLUSTER-dev && "$DEVICE_DIR" != /dev/* && "$DEVICE_DIR" != *..* ]] ||
  die "stand-in GPUs live only in the cluster's device directory /run/gpucluster-$CLUSTER-dev" \
    "(or the host's RUN_DIR/gpucluster-$CLUSTER-dev), not $DEVICE_DIR"
[[ $GPU_COUNT =~ ^[1-9][0-9]*$ ]] || die "GPU_COUNT must be a positive number, got '$GPU_COUNT'"
if [ -e /proc/driver/nvidia ]; then
  die "this host has an NVIDIA driver (/proc/driver/nvidia): gpu.stand_in is for machines without" \
    "a GPU; remove it and list the real devices in gpu.devices (e.g. /dev/nvidia0). Nothing was changed."
fi

mkdir -p "$DEVICE_DIR"
chmod 0755 "$DEVICE_DIR"

# stand_in NAME MINOR: $DEVICE_DIR/NAME is the character device 195:MINOR (replaced if not).
stand_in() {
  local path=$DEVICE_DIR/$1 minor=$2
  if [ -c "$path" ] && [ "$(stat -c '%t:%T' "$path")" = "$(printf 'c3:%x' "$minor")" ]; then
    return 0
  fi
  rm -f "$path"
  mknod -m 0666 "$path" c 195 "$minor"
  log "made stand-in GPU $path (195:$minor)"
}

for ((i = 0; i < GPU_COUNT; i++)); do
  stand_in "nvidia$i" "$i"
done
stand_in nvidiactl 255

# Fewer stand-ins than before: the extra ones go.
for path in "$DEVICE_DIR"/nvidia[0-9]*; do
  number=${path##*/nvidia}
  if [[ $number =~ ^[0-9]+$ ]] && [ "$number" -ge "$GPU_COUNT" ] && [ -c "$path" ]; then
    rm -f "$path"
    log "removed stand-in GPU $path"
  fi
done
