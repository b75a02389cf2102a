# One node container: an overlay clone of the image with our LXC config, started and ready.
# Safe to run for many containers at once: each touches only its own directory.
require CLUSTER CLUSTER_DIR IMAGE CONTAINER NODE_HOSTNAME LXC_CONFIG NAT_ADDRESS DEVICES DRIVER_FILES SHARED_DIR CPUSET
# stdout is the resource's output (the container's name); everything else goes to stderr.
exec 3>&1 1>&2

# Driver files this host has, found before anything changes (lib/gpu_driver.sh: gpu.driver_files,
# else nvidia-container-cli, else the host's loader cache): libraries bound into the node's
# library directory under their sonames, programs into /usr/bin, so the node's loader and
# PATH find them whatever the host's layout. A host file name becomes part of a config line:
# gpu_driver_mounts refuses names of unsafe characters.
driver_files=$(gpu_driver_mounts)
driver_mounts=""
while read -r source target; do
  [ -n "$source" ] || continue
  driver_mounts+="lxc.mount.entry = $source ${target#/} none bind,ro,optional,create=file 0 0"$'\n'
done <<< "$driver_files"
[ -z "$driver_files" ] || log "$NODE_HOSTNAME: driver files ($(gpu_driver_method)): $(awk '{ print $2 "<-" $1 }' <<< "$driver_files" | paste -sd ' ' -)"

# A node's cpuset (CPUSET=SLOT,COUNT): COUNT of this host's online CPUs from place SLOT of their
# list, wrapping around, so the host's CPUs are dealt to its nodes in turn. Empty: no pinning.
cpuset_lines=""
if [ -n "$CPUSET" ]; then
  IFS=, read -r slot count <<< "$CPUSET"
  [[ $slot =~ ^[0-9]+$ && $count =~ ^[1-9][0-9]*$ ]] || die "CPUSET must be SLOT,COUNT, got '$CPUSET'"
  online=()
  IFS=, read -ra ranges < /sys/devices/system/cpu/online
  for range in "${ranges[@]}"; do
    for ((cpu = ${range%-*}; cpu <= ${range#*-}; cpu++)); do online+=("$cpu"); done
  done
  [ "$count" -le "${#online[@]}" ] ||
    die "$NODE_HOSTNAME asks for $count CPUs (its cpus in the stack: nodes[].cpus, login.cpus) but this host has ${#online[@]} online"
  cpus=$(for ((i = 0; i < count; i++)); do echo "${online[(slot + i) % ${#online[@]}]}"; done | sort -n | paste -sd,)
  cpuset_lines="lxc.cgroup.cpuset.cpus = $cpus"$'\n'"lxc.cgroup2.cpuset.cpus = $cpus"$'\n'
fi

# Its memory limit (MEMORY_MB, MB; empty: none), in each cgroup version's key, without swap.
memory_lines=""
if [ -n "${MEMORY_MB:-}" ]; then
  [[ $MEMORY_MB =~ ^[1-9][0-9]*$ ]] || die "MEMORY_MB must be a number of MB, got '$MEMORY_MB'"
  limit=$((MEMORY_MB * 1048576))
  memory_lines="lxc.cgroup.memory.limit_in_bytes = $limit"$'\n'"lxc.cgroup2.memory.max = $limit"$'\n'
  memory_lines+="lxc.cgroup2.memory.swap.max = 0"$'\n'
fi

dir=$(lxc_dir "$CONTAINER")
# An id map in its config: an unprivileged container (the login node), a copy of its own.
unprivileged=""
! grep -q '^lxc\.idmap' <<< "$LXC_CONFIG" || unprivileged=1
# Renamed (the web app's name changed): the previous run printed the old name, which the
# engine hands back on update. Same address, so the old container goes before the new one.
previous=${PULUMI_COMMAND_STDOUT:-}
if [ -n "$previous" ] && [ "$previous" != "$CONTAINER" ] && lxc_exists "$previous" &&
  [ "$(lxc_owner "$previous")" = "$CLUSTER" ]; then
  log "renamed from $previous: removing it"
  lxc-stop -n "$previous" -k >/dev/null 2>&1 || true
  lxc-destroy -n "$previous" -f >&2
fi
if lxc_exists "$CONTAINER" || [ -d "$dir" ]; then
  lxc_ours "$CLUSTER" "$CLUSTER_DIR" "$CONTAINER" "$IMAGE" || die "LXC container $CONTAINER exists and is not this cluster's"
  if lxc_pending "$CLUSTER_DIR" "$CONTAINER"; then
    log "removing $CONTAINER left half-made by an interrupted run"
    lxc-destroy -n "$CONTAINER" -f >&2 || rm -rf "$dir"
  fi
fi
# A create that fails after it made the container removes it again: the state keeps no failed
# create, so no delete would ever remove it, and the image's delete refuses while clones of it
# remain. Only a container this run made: one that was there (an update, a container adopted
# from an interrupted run) stays as it is. A kill (SIGKILL) runs no trap: the pending marker
# leaves that one to the next run, which makes it again.
made=""
undo_made() {
  log "$CONTAINER: the create failed; removing the container it made"
  lxc-stop -n "$CONTAINER" -k >/dev/null 2>&1 || true
  lxc-destroy -n "$CONTAINER" -f >&2 || rm -rf "$dir" || true
  rm -f "$(lxc_pending_marker "$CLUSTER_DIR" "$CONTAINER")" || true
}
trap 'status=$?; [ "$status" = 0 ] || [ -z "$made" ] || undo_made; exit "$status"' EXIT
trap 'exit 143' TERM
trap 'exit 130' INT
if ! lxc_exists "$CONTAINER"; then
  lxc_exists "$IMAGE" || die "node image $IMAGE is missing"
  # The pending marker first: an interruption before the owner marker leaves a clone that
  # the next run still recognizes as this cluster's (and makes again).
  lxc_pending_begin "$CLUSTER_DIR" "$CONTAINER"
  made=1
  if [ -n "$unprivileged" ]; then
    copy_started=$SECONDS
    lxc_copy_unprivileged "$IMAGE" "$CONTAINER" "$LXC_CONFIG"
    log "$CONTAINER: an unprivileged copy of the image in $((SECONDS - copy_started)) s"
  else
    lxc-copy -n "$IMAGE" -N "$CONTAINER" -s -B overlay >&2
  fi
  clone_id "$CONTAINER" >/dev/null # the clone's identity, before anything is made inside it
  lxc_mark "$CLUSTER" "$CLUSTER_DIR" "$CONTAINER"
fi
mkdir -p "$SHARED_DIR"

# Host facts only known here: the numbers of the container's own devices (nvidia-uvm's major
# is dynamic), which driver files exist and which CPUs are online.
container_config() {
  # An optional bind of something this host lacks (a control device such as nvidia-modeset,
  # the CUDA toolkit) is left out: LXC would make its target anyway, an empty placeholder.
  printf '%s\n' "$LXC_CONFIG" | lxc_absent_binds_out
  printf '%s' "$cpuset_lines" "$memory_lines"
  device_allow_lines "$DEVICES"
  printf '%s' "$driver_mounts"
}
old_config=$(cat "$dir/gpucluster.conf" 2>/dev/null || true)
config=$(container_config)
container_config | write_if_changed "$dir/gpucluster.conf" 0644 && changed=1 || changed=0
grep -qxF "lxc.include = $dir/gpucluster.conf" "$dir/config" ||
  printf 'lxc.include = %s\n' "$dir/gpucluster.conf" >> "$dir/config"
# An unprivileged container's host ids, reserved for root before it (re)starts with them.
[ -z "$unprivileged" ] || subids_claim "$CONTAINER" "$LXC_CONFIG"

# A running container restarts (and its jobs die) only for a setting that needs it; the
# cpuset and the memory limit are applied live (a lower limit than it holds: at its next start); the settings it keeps until its next start are named.
if lxc_running "$CONTAINER" && [ "$changed" = 1 ]; then
  if lxc_needs_restart "$old_config" "$config"; then
    log "$CONTAINER: $(lxc_restart_keys "$old_config" "$config" | paste -sd ' ' -) changed, which only a restart applies: restarting (its jobs end)"
    diff <(lxc_conf_settings <<< "$old_config") <(lxc_conf_settings <<< "$config") >&2 || true
    lxc-stop -n "$CONTAINER" -t 30 >&2
  else
    if [ -n "$(lxc_conf_changed_keys "$old_config" "$config" "$LXC_LIVE_KEYS")" ]; then
      # A memory limit below what the container holds waits for its next start (lxc_apply_limits says so).
      if lxc_apply_limits "$CONTAINER" "$config"; then
        applied=$(lxc_conf_changed_keys "$old_config" "$config" "$LXC_LIVE_KEYS")
        [ -z "$LXC_MEMORY_DEFERRED" ] || applied=$(grep -v '\.memory\.' <<< "$applied" || true)
        [ -z "$applied" ] || log "$CONTAINER: $(paste -sd ' ' - <<< "$applied") applied to the running container"
      else
        log "$CONTAINER: the cpuset or swap limit could not be applied live: restarting (its jobs end)"
        lxc-stop -n "$CONTAINER" -t 30 >&2
      fi
    fi
    later=$(lxc_conf_changed_keys "$old_config" "$config" "$LXC_NEXT_START_KEYS" | paste -sd ' ' -)
    if [ -n "$later" ] && lxc_running "$CONTAINER"; then
      log "$CONTAINER: $later changed in its config; the running container keeps its current ones until it next starts (a reboot, or lxc-stop and lxc-start when its jobs allow)"
    fi
  fi
fi
# A node renamed with its addresses kept: the container of its old name, deleted only at the
# end of this update, still holds them, and two containers on one address answer in turns.
# Only a container that the config no longer lists can hold an address of this one (the config
# refuses one address twice): it stops now, and its delete removes it.
# Every node's create reads every other container's config: in bash, no program started per
# container (that made the creates' cost grow with the square of the cluster).
addresses=$(printf '%s\n' "$LXC_CONFIG" | grep -E '^lxc\.net\.[0-9]+\.ipv4\.address = ' || true)
# holds_address CONF: a line of CONF is one of the addresses (whole lines, as grep -x).
holds_address() {
  local line
  while IFS= read -r line; do
    [[ $'\n'$addresses$'\n' != *$'\n'"$line"$'\n'* ]] || return 0
  done < "$1"
  return 1
}
for conf in "${dir%/*}"/*/gpucluster.conf; do
  [ -n "$addresses" ] && [ -f "$conf" ] || continue
  other=${conf%/gpucluster.conf}
  other=${other##*/}
  [ "$other" != "$CONTAINER" ] && [ "$(lxc_owner "$other")" = "$CLUSTER" ] || continue
  holds_address "$conf" || continue
  if lxc_running "$other"; then
    log "$other holds an address of $CONTAINER (a renamed node): stopping it"
    lxc-stop -n "$other" -k >&2
  fi
done
# lxc-copy names the clone (its hostname, /etc/hostname) after the container; Slurm needs the
# node name. A stopped clone gets it in its overlay before it starts, with no lxc-attach.
named=0
if ! lxc_running "$CONTAINER"; then
  name_stopped_clone "$CONTAINER" "$NODE_HOSTNAME" && named=1
  lxc_stale_placeholders_out "$CONTAINER" "$old_config" "$config"
  lxc-start -n "$CONTAINER" -d >&2
fi
# A container that comes back at an address another one had (a rename, a replacement) has a
# new MAC: forget the host's stale neighbour entry instead of waiting for it to expire.
ip neigh flush to "$NAT_ADDRESS" 2>/dev/null || true
# One attach waits for the boot and reads the address and the hostname.
booted() {
  # With driver libraries bound in, the node's loader cache learns them (ldconfig) in the same attach.
  boot=$(in_ct "$CONTAINER" /bin/sh -c 'timeout 60 systemctl is-system-running --wait; [ -z "$1" ] || ldconfig >/dev/null 2>&1; ip -4 -o addr show dev eth0; hostname' sh "$driver_files" 2>/dev/null) || true
  case "$(head -n1 <<< "$boot")" in running | degraded) return 0 ;; *) return 1 ;; esac
}
boot=""
wait_until 120 "systemd in $CONTAINER" booted
grep -qF " $NAT_ADDRESS/" <<< "$boot" || die "$CONTAINER has no address $NAT_ADDRESS on eth0"
if [ "$named" = 0 ] || [ "$(tail -n1 <<< "$boot")" != "$NODE_HOSTNAME" ]; then
  in_ct "$CONTAINER" /bin/sh -c '
    set -e
    [ "$(cat /etc/hostname 2>/dev/null)" = "$1" ] || printf "%s\n" "$1" > /etc/hostname
    hostname "$1"
    sed -i "s/^127\.0\.1\.1[[:space:]].*/127.0.1.1\t$1/" /etc/hosts' sh "$NODE_HOSTNAME"
fi
printf '%s\n' "$CONTAINER" >&3
