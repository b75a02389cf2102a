# A container's LXC config: the devices cgroup lines the container script appends, and which
# changes of the config a running container can take without a restart.
# device_allow_lines DEVICES: devices cgroup allow lines (cgroup v1 and v2; LXC ignores the
# other one) for exactly these host device nodes, by their own major:minor. A device that is
# missing (optional control devices) gets none.
device_allow_lines() {
  local device number
  while read -r device; do
    [ -c "$device" ] || continue
    number=$(stat -c '%t %T' "$device" | { read -r major minor; printf '%d:%d' "0x$major" "0x$minor"; })
    printf 'lxc.cgroup.devices.allow = c %s rwm\nlxc.cgroup2.devices.allow = c %s rwm\n' "$number" "$number"
  done < <(lines "$1")
}

# lxc_absent_binds_out: the LXC config on stdin without its optional binds whose source this
# host lacks (each becomes a comment): LXC makes a bind's target before it mounts it, so an
# absent optional source would leave an empty mode-000 placeholder file in the node.
lxc_absent_binds_out() {
  local line source options entry='^lxc\.mount\.entry *= *([^ ]+) +[^ ]+ +[^ ]+ +([^ ]+)'
  while IFS= read -r line; do
    if [[ $line =~ $entry ]]; then
      source=${BASH_REMATCH[1]} options=${BASH_REMATCH[2]}
      if [[ ,$options, == *,optional,* ]] && [ ! -e "$source" ]; then
        printf '# absent on this host, not bound: %s\n' "$source"
        continue
      fi
    fi
    printf '%s\n' "$line"
  done
}

# lxc_stale_placeholders_out CONTAINER OLD_CONFIG NEW_CONFIG: a stopped overlay clone loses the
# empty files LXC made as targets of file binds (create=file) that OLD_CONFIG had and
# NEW_CONFIG has not (driver files of an old driver or layout, a control device now absent):
# left in its writable layer they would shadow the image's files (an empty, mode-000
# nvidia-smi on PATH). Only empty regular files are removed, nothing a job wrote.
lxc_stale_placeholders_out() {
  local name=$1 upper target file
  # No file binds before (a fresh clone has no config of ours yet), or the same config: none is stale.
  [[ $2 == *create=file* ]] && [ "$2" != "$3" ] || return 0
  upper=$(lxc_overlay_dir "$name")
  [ -n "$upper" ] && [ -d "$upper" ] || return 0
  while read -r target; do
    [ -n "$target" ] || continue
    case "/$target/" in */../*) continue ;; esac
    file=$upper/$target
    if [ -f "$file" ] && [ ! -L "$file" ] && [ ! -s "$file" ]; then
      rm -f "$file"
      log "$name: removed the stale bind placeholder /$target"
    fi
  done < <(comm -23 <(lxc_file_bind_targets <<< "$2") <(lxc_file_bind_targets <<< "$3"))
}

# lxc_file_bind_targets: the targets (relative to the rootfs) of the file binds in the config on stdin, sorted.
lxc_file_bind_targets() {
  sed -nE 's/^lxc\.mount\.entry *= *[^ ]+ +([^ ]+) +[^ ]+ +([^ ]*create=file[^ ]*).*$/\1/p' | sed 's#^/##' | sort -u
}

# A running container's config is compared setting by setting, so that rewriting it with the
# same effective settings (new comments, other spacing) or with settings it can take without
# a restart never stops the container and the jobs on it.
# lxc_conf_settings: the config on stdin without comments and blank lines, `key = value` as LXC
# reads it.
lxc_conf_settings() { sed -E '/^[[:space:]]*(#|$)/d; s/^[[:space:]]*([^=[:space:]]+)[[:space:]]*=[[:space:]]*/\1 = /; s/[[:space:]]+$//'; }

# Settings a running container takes live (its cpuset and memory limit, by lxc-cgroup), and settings it keeps
# until its next start without harm to what runs in it: capabilities, AppArmor, the cgroup
# placement, the devices allow list (the device nodes themselves are mount entries, and any
# change of those restarts), autostart. Every other setting (network, mounts, rootfs, name)
# needs a restart.
LXC_LIVE_KEYS='lxc\.cgroup2?\.cpuset\.cpus|lxc\.cgroup\.memory\.limit_in_bytes|lxc\.cgroup2\.memory\.(max|swap\.max)'
LXC_NEXT_START_KEYS='lxc\.(cap\.(drop|keep)|apparmor\.[a-z_.]+|cgroup\.dir\.[a-z.]+|cgroup2?\.devices\.(allow|deny)|start\.[a-z]+)'

# lxc_conf_keys REGEX: the settings on stdin (lxc_conf_settings) whose key matches REGEX,
# or with -v those whose key does not.
lxc_conf_keys() {
  local invert=
  [ "$1" != -v ] || { invert=-v; shift; }
  grep -E $invert "^($1) = " || true
}

# lxc_conf_changed_keys OLD NEW REGEX: the keys matching REGEX whose settings differ, one a line.
lxc_conf_changed_keys() {
  { diff <(lxc_conf_settings <<< "$1" | lxc_conf_keys "$3") <(lxc_conf_settings <<< "$2" | lxc_conf_keys "$3") || true; } |
    sed -nE 's/^[<>] ([^ ]+) = .*/\1/p' | sort -u
}

# lxc_effective_mounts: the settings on stdin without the optional mount entries whose source
# this host does not have: LXC skips them, so they mount nothing (an earlier release listed
# driver files that were absent).
lxc_effective_mounts() {
  local line source options
  while IFS= read -r line; do
    if [[ "$line" == "lxc.mount.entry = "* ]]; then
      read -r source _ _ options _ <<< "${line#lxc.mount.entry = }"
      [[ ",$options," == *,optional,* ]] && [ ! -e "$source" ] && continue
    fi
    printf '%s\n' "$line"
  done
}

# lxc_restart_keys OLD NEW: the keys of the changed settings that only a restart applies.
lxc_restart_keys() {
  local keep="$LXC_LIVE_KEYS|$LXC_NEXT_START_KEYS"
  { diff <(lxc_conf_settings <<< "$1" | lxc_conf_keys -v "$keep" | lxc_effective_mounts) \
    <(lxc_conf_settings <<< "$2" | lxc_conf_keys -v "$keep" | lxc_effective_mounts) || true; } |
    sed -nE 's/^[<>] ([^ ]+) = .*/\1/p; s/^[<>] ([^ ]+)$/\1/p' | sort -u
}

# lxc_needs_restart OLD NEW: whether the running container must restart to take NEW.
lxc_needs_restart() { [ -n "$(lxc_restart_keys "$1" "$2")" ]; }

# lxc_apply_limits CONTAINER CONFIG: the running container's cpuset and memory limit as CONFIG
# sets them (the host's online CPUs and no memory limit where CONFIG sets none), with the
# keys of the host's cgroup version (v2 only where /sys/fs/cgroup is the unified hierarchy).
# A memory limit below what the container holds now is never written to the running container:
# cgroup v2 would OOM-kill its jobs until they fit, v1 refuses (EBUSY). The container keeps its
# current limit until it next starts (CONFIG is its config by then), the line says so, and
# LXC_MEMORY_DEFERRED is set; a refused write (usage grew meanwhile) is the same. Fails (the
# create then restarts the container) only where the cpuset or the swap limit cannot be set.
LXC_MEMORY_DEFERRED=""
lxc_apply_limits() {
  local cpus memory swap usage_key limit_key unlimited
  LXC_MEMORY_DEFERRED=""
  cpus=$(lxc_conf_settings <<< "$2" | sed -nE 's/^lxc\.cgroup2?\.cpuset\.cpus = //p' | head -n1)
  [ -n "$cpus" ] || cpus=$(cat /sys/devices/system/cpu/online)
  lxc-cgroup -n "$1" cpuset.cpus "$cpus" || return 1
  if [ -f "${CGROUP_FS:-/sys/fs/cgroup}/cgroup.controllers" ]; then
    memory=$(lxc_conf_settings <<< "$2" | sed -nE 's/^lxc\.cgroup2\.memory\.max = //p' | head -n1)
    swap=$(lxc_conf_settings <<< "$2" | sed -nE 's/^lxc\.cgroup2\.memory\.swap\.max = //p' | head -n1)
    usage_key=memory.current limit_key=memory.max unlimited=max
  else
    memory=$(lxc_conf_settings <<< "$2" | sed -nE 's/^lxc\.cgroup\.memory\.limit_in_bytes = //p' | head -n1)
    usage_key=memory.usage_in_bytes limit_key=memory.limit_in_bytes unlimited=-1
  fi
  memory=${memory:-$unlimited}
  if lxc_memory_below_usage "$1" "$usage_key" "$memory" || ! lxc-cgroup -n "$1" "$limit_key" "$memory"; then
    LXC_MEMORY_DEFERRED=1
    log "$1: holds $(lxc_memory_mb "$(lxc_memory_held "$1" "$usage_key")") MB, more than its new memory limit of $(lxc_memory_mb "$memory") MB: the running container keeps its current limit until it next starts (no restart, its jobs go on); its config has the new one"
    return 0
  fi
  [ "$limit_key" != memory.max ] || lxc-cgroup -n "$1" memory.swap.max "${swap:-max}"
}

# lxc_memory_held CONTAINER USAGE_KEY: the bytes the running container holds (USAGE_KEY:
# memory.current on cgroup v2, memory.usage_in_bytes on v1) less its inactive file cache, which
# the kernel drops first; empty when unreadable.
lxc_memory_held() {
  local usage cache
  usage=$(lxc-cgroup -n "$1" "$2" 2>/dev/null) && [[ $usage =~ ^[0-9]+$ ]] || return 0
  # v1's memory.stat counts the container's own cgroups under it in total_*; v2's always does.
  cache=$(lxc-cgroup -n "$1" memory.stat 2>/dev/null | awk '$1 == "total_inactive_file" || $1 == "inactive_file" { n[$1] = $2 }
    END { v = ("total_inactive_file" in n) ? n["total_inactive_file"] : n["inactive_file"]; print v + 0 }') || cache=0
  [[ $cache =~ ^[0-9]+$ ]] && [ "$cache" -le "$usage" ] || cache=0
  echo $((usage - cache))
}

# lxc_memory_below_usage CONTAINER USAGE_KEY LIMIT: whether the byte LIMIT (a number; max or -1
# is none) is below what the running container holds now (lxc_memory_held). A usage that cannot
# be read counts as above: nothing is lowered blind.
lxc_memory_below_usage() {
  local held
  [[ $3 =~ ^[0-9]+$ ]] || return 1
  held=$(lxc_memory_held "$1" "$2")
  [ -z "$held" ] || [ "$held" -gt "$3" ]
}

# lxc_memory_mb BYTES: BYTES in MB (rounded up); anything else as it is (max), or "an unknown number of".
lxc_memory_mb() { if [[ $1 =~ ^[0-9]+$ ]]; then echo $((($1 + 1048575) / 1048576)); else echo "${1:-an unknown number of}"; fi; }
