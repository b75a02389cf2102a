# One node container: an overlay clone of the image with our LXC config, started and ready.
# Safe to run for many containers at once: each touches only its own directory.
require CLUSTER IMAGE CONTAINER NODE_HOSTNAME LXC_CONFIG NAT_ADDRESS DRIVER_FILES SHARED_DIR

# Driver files this host has, found before anything changes. A host file name becomes part
# of a config line: only names of safe characters, so a newline or a space in a name can
# never add or change a line; only files (a symlink to one included), never directories.
driver_mounts=""
shopt -s nullglob
while read -r pattern; do
  for file in $pattern; do
    [[ $file =~ ^[A-Za-z0-9._/+@-]+$ ]] ||
      die "driver file $(printf '%q' "$file") (gpu.driver_files: $pattern) has characters an LXC config line cannot hold; rename it or narrow the pattern"
    [ -f "$file" ] || continue
    driver_mounts+="lxc.mount.entry = $file ${file#/} none bind,ro,optional,create=file 0 0"$'\n'
  done
done < <(lines "$DRIVER_FILES")
shopt -u nullglob

dir=$(lxc_dir "$CONTAINER")
if lxc_exists "$CONTAINER"; then
  [ "$(lxc_owner "$CONTAINER")" = "$CLUSTER" ] || die "LXC container $CONTAINER exists and is not this cluster's"
else
  lxc_exists "$IMAGE" || die "node image $IMAGE is missing"
  lxc-copy -n "$IMAGE" -N "$CONTAINER" -s -B overlay >&2
  echo "$CLUSTER" > "$dir/gpucluster-owner"
fi
mkdir -p "$SHARED_DIR"

# Host facts only known here: the dynamic nvidia-uvm major and which driver files exist.
{
  printf '%s\n' "$LXC_CONFIG"
  uvm_major=$(awk '$2 == "nvidia-uvm" {print $1}' /proc/devices)
  if [ -n "$uvm_major" ]; then
    printf 'lxc.cgroup.devices.allow = c %s:* rwm\nlxc.cgroup2.devices.allow = c %s:* rwm\n' "$uvm_major" "$uvm_major"
  fi
  printf '%s' "$driver_mounts"
} | write_if_changed "$dir/gpucluster.conf" 0644 && changed=1 || changed=0
grep -qxF "lxc.include = $dir/gpucluster.conf" "$dir/config" ||
  printf 'lxc.include = %s\n' "$dir/gpucluster.conf" >> "$dir/config"

if lxc_running "$CONTAINER" && [ "$changed" = 1 ]; then
  log "$CONTAINER: config changed, restarting"
  lxc-stop -n "$CONTAINER" -t 30 >&2
fi
lxc_running "$CONTAINER" || lxc-start -n "$CONTAINER" -d >&2
wait_until 120 "systemd in $CONTAINER" systemd_ready "$CONTAINER"
in_ct "$CONTAINER" ip -4 -o addr show dev eth0 | grep -qF " $NAT_ADDRESS/" ||
  die "$CONTAINER has no address $NAT_ADDRESS on eth0"
# lxc-copy names the clone's /etc/hostname after the container; Slurm needs the node name.
printf '%s\n' "$NODE_HOSTNAME" | ct_write_if_changed "$CONTAINER" /etc/hostname 0644 root:root || true
in_ct "$CONTAINER" hostname "$NODE_HOSTNAME"
in_ct "$CONTAINER" sed -i "s/^127\.0\.1\.1[[:space:]].*/127.0.1.1\t$NODE_HOSTNAME/" /etc/hosts
