# The state volume of an EC2 host, at every boot (cloud-init bootcmd, before sshd and the
# host's commands): wait for the volume, give it a filesystem only if it has none (its first
# boot), then mount it and bind its directories over the ones the cluster keeps state in.
# cloud-init's init stage runs it before network-online.target, so before sshd and the
# cluster's boot unit.
# Arguments: MOUNT_POINT "DEVICE..." DIR... (DIRs parents first). FSTAB: /etc/fstab.
set -eu
mount_point=$1 devices=$2
shift 2
fstab=${FSTAB:-/etc/fstab}

# The volume appears some seconds after the instance starts: it is attached to the running
# instance (by its volume id on NVMe instances, else by the name it was attached as).
device=
tries=0
while [ -z "$device" ]; do
  for candidate in $devices; do
    if [ -e "$candidate" ]; then device=$candidate; break; fi
  done
  [ -n "$device" ] && break
  tries=$((tries + 1))
  if [ "$tries" -gt "${WAIT_S:-600}" ]; then
    echo "gpucluster: the state volume ($devices) was not attached" >&2
    exit 1
  fi
  sleep 1
done

# blkid exits 2 when it finds no signature at all: only then is the volume new. Any other
# failure, or another filesystem, stops here: an existing filesystem is never formatted.
found=0
kind=$(blkid -p -o value -s TYPE "$device") || found=$?
if [ "$found" -eq 2 ]; then
  mkfs.ext4 -q -L gpucluster-state "$device"
elif [ "$found" -ne 0 ]; then
  echo "gpucluster: blkid failed ($found) on $device: not formatting it" >&2
  exit 1
elif [ "$kind" != ext4 ]; then
  echo "gpucluster: $device holds $kind, not ext4: left alone" >&2
  exit 1
fi

# The device's name is stable (the volume's id, or the name it was attached as): fstab mounts
# it early at later boots. The binds are made here only, after the volume is surely mounted
# (a bind in fstab would be mounted over the empty directory below when the volume is not).
line="$device $mount_point ext4 defaults,nofail 0 2"
grep -qxF "$line" "$fstab" 2>/dev/null || printf '%s\n' "$line" >>"$fstab"
mkdir -p "$mount_point"
mountpoint -q "$mount_point" || mount -T "$fstab" "$mount_point"
mountpoint -q "$mount_point" || {
  echo "gpucluster: the state volume is not mounted at $mount_point" >&2
  exit 1
}
for dir in "$@"; do
  kept=$mount_point$dir
  mkdir -p "$kept" "$dir"
  mountpoint -q "$dir" || mount --bind "$kept" "$dir"
done
