# Kernel limits that many node containers need. Every node's systemd, journald and logind take
# inotify instances under root's uid (the containers are privileged); the kernel's default of
# 128 instances per user runs out at about 40 nodes, and the next node's systemd then never ends
# its boot ("Failed to create inotify object: Too many open files").
# Each cluster (each host of it) owns one file in /etc/sysctl.d/, which persists the values
# across reboots (systemd-sysctl; the boot unit applies them too) and records:
#   # baseline KEY VALUE   the host's own value, before the first cluster raised it
#   # share KEY VALUE      what this cluster's containers on this host need
#   KEY = VALUE            what it set: the baseline plus every cluster's share
# A value is never set below what the host had; one someone else raised since is left alone.
# A destroy removes the cluster's file and sets the baseline plus the other clusters' shares.
KERNEL_LIMITS_DIR=${KERNEL_LIMITS_DIR:-/etc/sysctl.d}
KERNEL_LIMITS_PROC=${KERNEL_LIMITS_PROC:-/proc/sys}

kernel_limit_path() { printf '%s/%s' "$KERNEL_LIMITS_PROC" "${1//.//}"; }
kernel_limit_live() { cat "$(kernel_limit_path "$1")"; }
kernel_limit_files() {
  local file
  for file in "$KERNEL_LIMITS_DIR"/90-gpucluster-*.conf; do
    [ ! -f "$file" ] || printf '%s\n' "$file"
  done
}
# kernel_limit_note FILE NOTE KEY: the value of FILE's "# NOTE KEY VALUE" line.
kernel_limit_note() { awk -v n="$2" -v k="$3" '$1 == "#" && $2 == n && $3 == k { print $4; exit }' "$1"; }

# kernel_limit_target FILE KEY SHARE: the baseline (recorded by any cluster's file, else the
# live value) plus SHARE plus the other files' shares of KEY; prints "TARGET BASELINE".
kernel_limit_target() {
  local own=$1 key=$2 share=$3 baseline="" others=0 file note
  while read -r file; do
    [ -n "$baseline" ] || baseline=$(kernel_limit_note "$file" baseline "$key")
    [ "$file" != "$own" ] || continue
    note=$(kernel_limit_note "$file" share "$key")
    others=$((others + ${note:-0}))
  done < <(kernel_limit_files)
  [ -n "$baseline" ] || baseline=$(kernel_limit_live "$key")
  printf '%s %s\n' "$((baseline + others + share))" "$baseline"
}

# kernel_limits_set CLUSTER FILE SHARES: the cluster's limits ("KEY SHARE" lines) in place and
# persisted in FILE; with no SHARES, the cluster's file goes and its share is given back.
kernel_limits_set() {
  local cluster=$1 file=$2 shares=$3 key share old set target baseline live keys text="" lock
  exec {lock}> "${KERNEL_LIMITS_LOCK:-/run/gpucluster-kernel-limits.lock}"
  flock "$lock" # several clusters at once: each sees the others' files
  keys=$({ lines "$shares" | awk '{ print $1 }'; [ ! -f "$file" ] || awk '$1 == "#" && $2 == "share" { print $3 }' "$file"; } | sort -u)
  for key in $keys; do
    old=""
    share=$(lines "$shares" | awk -v k="$key" '$1 == k { print $2; exit }')
    read -r target baseline < <(kernel_limit_target "$file" "$key" "${share:-0}")
    live=$(kernel_limit_live "$key")
    # What the clusters set so far: the baseline and every share, this cluster's as it was.
    [ ! -f "$file" ] || old=$(kernel_limit_note "$file" share "$key")
    read -r set _ < <(kernel_limit_target "$file" "$key" "${old:-0}")
    # Up to the target; down to it only from what the clusters set (a shrink, a destroy), never
    # from a value the host had or someone raised since.
    if [ "$live" -lt "$target" ] || { [ "$live" = "$set" ] && [ "$live" != "$target" ]; }; then
      printf '%s\n' "$target" > "$(kernel_limit_path "$key")" 2>/dev/null ||
        die "cannot set $key to $target (it is $live): $cluster's node containers need it (their systemd runs out of inotify instances and never ends its boot); set it on the host (sysctl -w $key=$target, and in $KERNEL_LIMITS_DIR/) or place fewer nodes on this host"
      log "$key: $live -> $target ($cluster)"
    fi
    [ -n "$share" ] || continue
    text+="# baseline $key $baseline"$'\n'"# share $key $share"$'\n'"$key = $target"$'\n'
  done
  if [ -z "$text" ]; then
    rm -f "$file"
  else
    { printf '# The kernel limits the gpucluster cluster %s needs on this host (its destroy removes this file;\n' "$cluster"
      printf '# the baseline is what the host had before, the share what its containers need).\n%s' "$text"; } |
      write_if_changed "$file" 0644 || true
  fi
}

# kernel_limits_boot: after a boot, every cluster's limits as they were set (systemd-sysctl
# applied the files one after the other: the last one's value, which may predate another's share).
kernel_limits_boot() {
  local file key share target baseline
  while read -r file; do
    while read -r key share; do
      read -r target baseline < <(kernel_limit_target "$file" "$key" "$share")
      [ "$(kernel_limit_live "$key")" -ge "$target" ] || printf '%s\n' "$target" > "$(kernel_limit_path "$key")" ||
        log "warning: could not set $key to $target"
    done < <(awk '$1 == "#" && $2 == "share" { print $3, $4 }' "$file")
  done < <(kernel_limit_files)
}
