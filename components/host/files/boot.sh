# Bring the cluster's host state back after a boot, as the create scripts made it: the kernel
# limits the nodes need, bridges with their addresses, ip_forward, the iptables rules, routes to
# the other hosts (several hosts), the shared filesystem (shared_fs), the stand-in GPUs (gpu.stand_in), then the containers,
# whose daemons (Slurm's and munge's among them: none runs on the host) are systemd units inside them, the web app's cluster-status writer and the metrics' cluster exporter.
# Idempotent: what is already there is left alone. Usage: boot.sh HOST_STATE_FILE
load_host_state "${1:?usage: boot.sh HOST_STATE_FILE}"
require CLUSTER CLUSTER_DIR NAT_BRIDGE NAT_ADDRESS NAT_SUBNET CLUSTER_BRIDGE FORWARDS MUNGE_KEY_FILE \
  CONTROLLER_CONF IMAGE NODE_CONTAINERS WEB_CONTAINER
# Every cluster's kernel limits (inotify instances) before a container starts.
kernel_limits_boot
bridge_up "$CLUSTER" "$NAT_BRIDGE" "$NAT_ADDRESS"
bridge_up "$CLUSTER" "$CLUSTER_BRIDGE" ""
ip_forward_acquire "$CLUSTER"
bridge_rules_up "$CLUSTER" "$NAT_BRIDGE" "$NAT_SUBNET" "${BURST_ACCESS:-}"
bridge_rules_up "$CLUSTER" "$CLUSTER_BRIDGE" "" ""
for forward in $FORWARDS; do
  IFS=, read -r tag host_port address port sources <<< "$forward"
  forward_up "$tag" "$host_port" "$address" "$port" "$sources"
done
# With several hosts: routes to the other hosts' container subnets (SUBNET,VIA ...).
read -ra routes <<< "${ROUTES:-}"
[ "${#routes[@]}" = 0 ] || routes_up "$CLUSTER" "$NAT_BRIDGE" "$NAT_SUBNET" "${routes[@]}"
# The firewall guards (components/files/lib/guards.sh): the exporter's, the shared filesystem's.
for guard in ${EXPORTER_GUARD:-} ${NFS_GUARD:-}; do
  guard_up "$guard"
done
log "$CLUSTER: bridges, ip_forward, routes and firewall rules in place"
# The shared filesystem (shared_fs), after the network: the server where this host serves it,
# then the mount at the shared directory, which waits for the server; before any node binds it.
if [ -n "${NFS_SERVER:-}" ]; then
  IFS=, read -r conf_dir address port <<< "$NFS_SERVER"
  nfs_server_up "$conf_dir" "$address" "$port"
fi
if [ -n "${SHARED_MOUNT:-}" ]; then
  IFS=, read -r client server port export dir state <<< "$SHARED_MOUNT"
  shared_mount_up "$client" "$server" "$port" "$export" "$dir" "$state"
  log "$CLUSTER: $server:$export mounted at $dir"
fi
# Stand-in GPUs live under the run directory, a tmpfs: made again before the containers that
# bind them start (their bind mounts are optional: a node would boot without its GPUs).
if [ -n "${STAND_IN_GPUS:-}" ]; then
  IFS=, read -r device_dir count <<< "$STAND_IN_GPUS"
  mkdir -p "$device_dir"
  chmod 0755 "$device_dir"
  for ((i = 0; i <= count; i++)); do
    name=nvidia$i minor=$i
    [ "$i" -lt "$count" ] || { name=nvidiactl; minor=255; }
    [ -c "$device_dir/$name" ] || mknod -m 0666 "$device_dir/$name" c 195 "$minor"
  done
  log "$CLUSTER: $count stand-in GPU(s) in $device_dir"
fi
# The cluster's Slurm and munge run in its containers only (a slurmctld whose slurmdbd does
# not answer yet exits, and its unit starts it again).
# The controller's container is a node's, or its own (placement 'host').
containers=$(printf '%s\n' ${DB_CONTAINER:-} ${REGISTRY_CONTAINER:-} ${CONTROLLER_CONTAINER:-} $NODE_CONTAINERS $WEB_CONTAINER ${METRICS_CONTAINER:-} ${LOGIN_CONTAINER:-} | awk '!seen[$0]++' | paste -sd' ')
for container in $containers; do
  [ "$(lxc_owner "$container")" = "$CLUSTER" ] || die "LXC container $container is missing or not this cluster's"
  lxc_running "$container" || lxc-start -n "$container" -d >&2
done
for container in $containers; do
  lxc-wait -n "$container" -s RUNNING -t 60
done
log "$CLUSTER: containers running: $containers"
# The web app's cluster-status writer, a plain daemon (as its create starts it),
# started again when no live writer is behind its pid file.
if [ -n "${STATUS_WRITER:-}" ]; then
  IFS=, read -r status_dir interval <<< "$STATUS_WRITER"
  program=$CLUSTER_DIR/cluster-status.py
  if [ ! -f "$program" ]; then
    log "$CLUSTER: no cluster-status writer $program: 'pulumi up' writes it"
  elif [ -z "$(daemon_pid "$CLUSTER_DIR/cluster-status.pid" python3 "$program")" ]; then
    install -d -m 0755 -o root -g root "$status_dir" # root's alone: its writer is root
    detached --background "$CLUSTER_DIR/cluster-status.pid" "$CLUSTER_DIR/cluster-status.log" \
      SLURM_BIN="$CLUSTER_DIR/bin" setpriv --no-new-privs python3 "$program" "$CLUSTER" "$status_dir/cluster.json" "$interval"
    log "$CLUSTER: cluster-status writer started (pid $(cat "$CLUSTER_DIR/cluster-status.pid"))"
  fi
fi
# The metrics' cluster exporter, a plain daemon (as its create starts it).
if [ -n "${METRICS_EXPORTER:-}" ]; then
  program=$METRICS_EXPORTER/slurm_exporter.py
  if [ ! -f "$program" ]; then
    log "$CLUSTER: no cluster exporter $program: 'pulumi up' writes it"
  elif [ -z "$(daemon_pid "$METRICS_EXPORTER/exporter.pid" python3 "$program")" ]; then
    detached --background "$METRICS_EXPORTER/exporter.pid" "$METRICS_EXPORTER/exporter.log" \
      SLURM_BIN="$CLUSTER_DIR/bin" setpriv --no-new-privs python3 "$program" "$METRICS_EXPORTER/exporter.json"
    log "$CLUSTER: cluster exporter started (pid $(cat "$METRICS_EXPORTER/exporter.pid"))"
  fi
fi
