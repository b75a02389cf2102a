# Preflight: read-only checks of the host, before anything is changed. Every problem is
# reported (not just the first), then it fails. Prints one JSON line of what it found.
require CLUSTER CLUSTER_DIR IMAGE GPU_DEVICES CONTROL_DEVICES NODE_CPUS NAT_BRIDGE NAT_ADDRESS CLUSTER_BRIDGE \
  CLUSTER_SUBNET HOST_PORTS CONTAINERS
problems=()
owner_alias="gpucluster:$CLUSTER"

# Distribution: the host scripts install the packages of the supported ones, by their names
# there (lib/host_distribution.sh); another one would fail half-way through.
line=$(host_distribution_problem /etc/os-release)
[ -z "$line" ] || problems+=("$line")

# State directory: every existing directory on the way to it must be root's and writable by
# root only, or someone else could have planted the munge key (or the directory) we trust.
path=""
while read -r part; do
  path="$path/$part"
  [ -e "$path" ] || break
  if [ -L "$path" ] || [ ! -d "$path" ] || [ "$(stat -c %u "$path")" != 0 ] ||
    [ $((8#$(stat -c %a "$path") & 8#022)) != 0 ]; then
    problems+=("$path is not a root-owned directory writable by root only (host.state_dir): the cluster's munge key cannot be kept there")
    break
  fi
done < <(printf '%s\n' "${CLUSTER_DIR#/}" | tr '/' '\n')
key="$CLUSTER_DIR/munge.key"
if [ -e "$key" ] || [ -L "$key" ]; then
  [ -f "$key" ] && [ ! -L "$key" ] && [ "$(stat -c '%u %a' "$key")" = "0 400" ] ||
    problems+=("munge key $key exists but is not a regular file owned by root with mode 0400 (host.state_dir): remove it")
fi

# CPUs: a node's cpuset is that many distinct online CPUs of this host (dealt in turn).
online=$(getconf _NPROCESSORS_ONLN)
[ "$NODE_CPUS" -le "$online" ] ||
  problems+=("nodes[].cpus: a node asks for $NODE_CPUS CPUs but this host has $online online: lower nodes[].cpus")

# Memory: the node containers' limits together (nodes[].memory_mb and their daemons') fit in
# this host's memory, less HOST_RESERVED_MB for the host itself: a node never meets an OOM
# killer its limit did not call. The kernel's MemTotal, in MB.
HOST_RESERVED_MB=1024
total_mb=$(($(awk '$1 == "MemTotal:" { print $2 }' /proc/meminfo) / 1024))
[ "${NODE_MEMORY_MB:-0}" -le $((total_mb - HOST_RESERVED_MB)) ] ||
  problems+=("nodes[].memory_mb: this host's nodes need ${NODE_MEMORY_MB} MB in all (nodes[].memory_mb and what each node keeps for its own daemons, and login.memory_mb where the login node runs here) but the host has ${total_mb} MB, of which ${HOST_RESERVED_MB} MB stay with the host: lower nodes[].memory_mb (a node without one gets its share of the host, measured when it was first made) or place nodes on another host")

# Kernel limits the node containers need (lib/kernel_limits.sh): the create raises them, unless
# the kernel refuses (a read-only /proc/sys, as inside a container); then they must be there already.
while read -r key share; do
  [ -n "$key" ] || continue
  read -r target _ < <(kernel_limit_target "$KERNEL_LIMITS_FILE" "$key" "$share")
  live=$(kernel_limit_live "$key" 2>/dev/null || echo 0)
  [ "$live" -ge "$target" ] || [ -w "$(kernel_limit_path "$key")" ] ||
    problems+=("$key is $live and cannot be raised here (read-only); this host's $(($(lines "$CONTAINERS" | wc -l))) containers need $target (each node's systemd takes inotify instances under root's uid, and one that runs out never ends its boot): set it on the host (sysctl -w $key=$target, and in /etc/sysctl.d/) or place fewer nodes on this host")
done < <(lines "${KERNEL_LIMITS:-}")

# GPU device nodes: character devices with NVIDIA's major (195).
devices=()
while read -r device; do
  if [ ! -e "$device" ]; then
    problems+=("GPU device $device is missing (gpu.devices): is the NVIDIA driver loaded? (nvidia-smi; modprobe nvidia) Without a GPU, use stand-ins: gpu.stand_in, as stacks/Pulumi.nogpu.yaml does")
  elif [ ! -c "$device" ] || [ "$((16#$(stat -c %t "$device")))" != 195 ]; then
    problems+=("GPU device $device is not a character device with NVIDIA's major 195 (gpu.devices)")
  else
    devices+=("$device")
  fi
done < <(lines "$GPU_DEVICES")

# Control devices are optional, but when present they must be character devices.
while read -r device; do
  if [ -e "$device" ] && [ ! -c "$device" ]; then
    problems+=("control device $device is not a character device (gpu.control_devices)")
  fi
done < <(lines "$CONTROL_DEVICES")

# The driver's user-space files (lib/gpu_driver.sh): on a host with real GPUs (not stand-ins)
# whose kernel driver is loaded, without libcuda.so.1 the nodes would schedule GPUs that no job
# can use. (Without the kernel driver no device answers at all; a test host's character devices
# of NVIDIA's major named in gpu.devices, as the last release's e2e stack does, pass as before.)
if ! driver_files=$(gpu_driver_mounts 2>&1); then
  problems+=("${driver_files#error: }")
  driver_files=
elif [ -z "${GPU_STAND_IN:-}" ] && [ -n "$(lines "$GPU_DEVICES")" ] && [ -e "${NVIDIA_DRIVER_PROC:-/proc/driver/nvidia}" ] &&
  [ -z "$(gpu_driver_libcuda "$driver_files")" ]; then
  arch_flag=$(gpu_ldconfig_flag)
  case "$(gpu_driver_method)" in
    gpu.driver_files)
      looked="gpu.driver_files ($(lines "$DRIVER_FILES" | paste -sd ' ' -)) matches no libcuda.so*: add the driver's libcuda.so.1 to it, or leave gpu.driver_files empty to find the driver on the host" ;;
    "nvidia-container-cli list")
      looked="\`nvidia-container-cli list --libraries\` (NVIDIA's container toolkit) lists no libcuda.so: is the driver's user-space part installed?" ;;
    *)
      looked="the host's loader cache (\`ldconfig -p\`) has no libcuda.so.1${arch_flag:+ for $arch_flag} among its $(ldconfig -p 2>/dev/null | grep -c ' => ' || true) libraries, and nvidia-container-cli $(command -v nvidia-container-cli >/dev/null && echo 'lists none' || echo 'is not installed'): install the driver's user-space libraries matching its kernel module, or add their directory (e.g. /usr/local/nvidia/lib64) to /etc/ld.so.conf.d/ and run ldconfig, or name them in gpu.driver_files" ;;
  esac
  problems+=("no NVIDIA driver library libcuda.so.1 found on this host for its GPUs (gpu.devices: real GPUs, not stand-ins): looked for libcuda.so.1, libnvidia-ml.so.1, libnvidia-ptxjitcompiler.so.1 and nvidia-smi; $looked")
fi

uvm_major=$(awk '$2 == "nvidia-uvm" {print $1}' /proc/devices)
if [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ]; then cgroup_version=2; else cgroup_version=1; fi
# cgroup controllers LXC must be able to delegate to the nodes (lib/cgroups.sh).
while read -r line; do
  [ -z "$line" ] || problems+=("$line")
done < <(if [ "$cgroup_version" = 2 ]; then cgroup_v2_problems /sys/fs/cgroup /proc/1/cgroup; else cgroup_v1_problems /proc/self/mounts; fi)
driver_version=none
if command -v nvidia-smi >/dev/null; then
  driver_version=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n1) || driver_version=unknown
elif [ -r /proc/driver/nvidia/version ]; then
  driver_version=$(sed -n 's/.*Kernel Module *\([0-9.]*\).*/\1/p' /proc/driver/nvidia/version | head -n1)
fi

# Bridges: a name already in use must be our own bridge (marked by its alias).
for bridge in "$NAT_BRIDGE" "$CLUSTER_BRIDGE"; do
  if [ -e "/sys/class/net/$bridge" ]; then
    alias=$(cat "/sys/class/net/$bridge/ifalias" 2>/dev/null || true)
    if [ "${alias#gpucluster:}" != "$alias" ] && [ "$alias" != "$owner_alias" ]; then
      problems+=("interface $bridge belongs to the cluster '${alias#gpucluster:}' (network.*.name): if you renamed the cluster (name), destroy it under its old name first, or give this one other bridges and subnets")
    elif [ "$alias" != "$owner_alias" ]; then
      problems+=("interface $bridge already exists and is not this cluster's (network.*.name): pick another name or remove it")
    fi
  fi
done

# The state directory holds the munge key of a running cluster: moving it in place would
# split the cluster between two keys.
if [ "$(cat "/sys/class/net/$NAT_BRIDGE/ifalias" 2>/dev/null)" = "$owner_alias" ] && [ ! -e "$CLUSTER_DIR/munge.key" ]; then
  problems+=("the cluster $CLUSTER is up on this host with its state elsewhere ($CLUSTER_DIR has no munge key): changing host.state_dir in place is not supported; destroy the cluster with its old config first, then apply")
fi

# Subnets: no other interface (but our own bridges) may hold an address inside ours (Debian's lxc-net takes 10.0.3.1/24).
# Run apart and its status checked: a check that cannot run is a problem, never a pass.
if ! command -v ip >/dev/null; then
  # The host packages bring iproute2, but only after this check, which changes nothing.
  problems+=("iproute2 is not installed on this host (no \`ip\` command): the subnet check needs it; install it first (apt-get install iproute2)")
  overlaps=
elif ! overlaps=$(python3 - "$owner_alias" "$NAT_ADDRESS" "$CLUSTER_SUBNET" "$NAT_BRIDGE" "$CLUSTER_BRIDGE" 2>&1 <<'PY'
import ipaddress, json, pathlib, subprocess, sys
owner, nat, cluster, *ours = sys.argv[1:]
wanted = {"network.nat_bridge.address": ipaddress.ip_interface(nat).network,
          "network.cluster_bridge.subnet": ipaddress.ip_network(cluster)}
for link in json.loads(subprocess.run(["ip", "-j", "-4", "addr"], capture_output=True, text=True, check=True).stdout or "[]"):
    alias = pathlib.Path(f"/sys/class/net/{link['ifname']}/ifalias")
    # Ours by name, or a bridge of this cluster being renamed (it goes before the new one).
    if link["ifname"] in ours or (alias.exists() and alias.read_text().strip() == owner):
        continue
    for info in link.get("addr_info", []):
        net = ipaddress.ip_interface(f"{info['local']}/{info['prefixlen']}").network
        for field, subnet in wanted.items():
            if net.overlaps(subnet):
                print(f"{link['ifname']} already has {info['local']}/{info['prefixlen']}, inside {subnet} ({field}): pick a free subnet")
PY
); then
  problems+=("the subnet check could not run: $(tail -n 1 <<< "$overlaps")")
  overlaps=
fi
while read -r line; do
  [ -z "$line" ] || problems+=("$line")
done <<< "$overlaps"

# People (users[]): a name or id on the host that is someone else's.
if [ -n "${USERS:-}" ]; then
  mapfile -t specs < <(lines "$USERS")
  while read -r line; do
    problems+=("${line#error: } (users[])")
  done < <(users_check "${specs[@]}" 2>&1 || true)
fi

# Host ports: nothing may listen on a port we forward (lib/ports.sh: the kernel's own tables).
while read -r port; do
  if tcp_listening "$port"; then
    problems+=("host port $port is in use by a listening process (web_app.host_port / forwards[].host_port)")
  fi
  # ...or already forwarded by someone else's DNAT rule.
  foreign=0
  if command -v iptables >/dev/null; then
    # A TCP DNAT or REDIRECT of this port (what a forward is); other rules naming it forward nothing.
    foreign=$(iptables -w 30 -t nat -S | grep -E -- "-p tcp .*--dport $port( |$).*-j (DNAT|REDIRECT)( |$)" |
      grep -vc -- "gpucluster:$CLUSTER:" || true)
  fi
  if [ "${foreign:-0}" -gt 0 ]; then
    problems+=("host port $port is already forwarded by another iptables DNAT rule (web_app.host_port / forwards[].host_port)")
  fi
done < <(lines "$HOST_PORTS")

# The directory this host serves (shared_fs: served): files there before the cluster are
# refused unless the config adopts them (shared_fs.adopt_existing).
if [ -n "${SERVED_DIRECTORY:-}" ] && [ -z "${SERVED_ADOPT:-}" ]; then
  line=$(served_directory_problem "$SERVED_DIRECTORY" "$CLUSTER" "$SERVED_CONF_DIR")
  [ -z "$line" ] || problems+=("$line")
fi

# Containers: a name already taken must be ours.
while read -r container; do
  image=$IMAGE
  [ "$container" != "$IMAGE" ] || image=
  if { lxc_exists "$container" || [ -d "$(lxc_dir "$container")" ]; } &&
    ! lxc_ours "$CLUSTER" "$CLUSTER_DIR" "$container" "$image"; then
    owner=$(lxc_owner "$container")
    problems+=("LXC container $container already exists and is not this cluster's${owner:+ (it belongs to the cluster $owner)}: rename the cluster or remove it")
  fi
done < <(lines "$CONTAINERS")

# Another release of the node image (another Slurm) on a running cluster.
if [ -n "${IMAGE_DEBIAN:-}" ]; then
  while read -r line; do problems+=("$line"); done < <(image_release_problems "$IMAGE" "$IMAGE_DEBIAN")
fi

if [ "${#problems[@]}" -gt 0 ]; then
  printf 'preflight failed, nothing was changed:\n' >&2
  printf '  - %s\n' "${problems[@]}" >&2
  exit 1
fi
python3 -c 'import json, sys; print(json.dumps({"devices": sys.argv[1].split(), "uvm_major": sys.argv[2] or "none",
  "cgroup_version": sys.argv[3], "driver_version": sys.argv[4], "driver_files": sys.argv[5].split()}))' \
  "${devices[*]}" "$uvm_major" "$cgroup_version" "$driver_version" "$(awk '{ print $1 }' <<< "$driver_files")"
