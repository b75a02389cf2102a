# Drift check, read-only: every host resource the cluster owns, against the description
# rendered from the stack config (HOST_STATE_FILE). One line per check; MISSING, FOREIGN or
# WRONG lines name the drift, and the exit status is 1 when there is any.
# Usage: verify_host.sh HOST_STATE_FILE
expected=${1:?usage: verify_host.sh HOST_STATE_FILE}
load_host_state "$expected"
require CLUSTER CLUSTER_DIR NAT_BRIDGE NAT_ADDRESS NAT_SUBNET CLUSTER_BRIDGE FORWARDS MUNGE_KEY_FILE \
  CONTROLLER_CONF CONTROLLER_CONTAINER IMAGE NODE_CONTAINERS WEB_CONTAINER BOOT_UNIT
drift=0
ok() { printf 'ok       %s\n' "$*"; }
bad() { printf '%-8s %s\n' "$1" "${*:2}"; drift=1; }
check() { # check WHAT KIND COMMAND...: ok when COMMAND succeeds, else KIND WHAT
  local what=$1 kind=$2; shift 2
  if "$@" >/dev/null 2>&1; then ok "$what"; else bad "$kind" "$what"; fi
}
owner="gpucluster:$CLUSTER"

# Bridges: ours by alias, the NAT bridge with its address, both up.
for bridge in "$NAT_BRIDGE" "$CLUSTER_BRIDGE"; do
  if [ ! -e "/sys/class/net/$bridge" ]; then
    bad MISSING "bridge $bridge"
    continue
  fi
  alias=$(cat "/sys/class/net/$bridge/ifalias" 2>/dev/null || true)
  [ "$alias" = "$owner" ] || { bad FOREIGN "bridge $bridge (alias '$alias', not $owner)"; continue; }
  check "bridge $bridge up" WRONG /bin/sh -c 'ip -o link show dev "$1" | grep -q "[<,]UP[,>]"' sh "$bridge"
done
[ ! -e "/sys/class/net/$NAT_BRIDGE" ] ||
  check "address $NAT_ADDRESS on $NAT_BRIDGE" MISSING /bin/sh -c 'ip -4 -o addr show dev "$1" | grep -qw -- "$2"' sh "$NAT_BRIDGE" "$NAT_ADDRESS"

# Forwarding: on, and this cluster counted among its users.
check "net.ipv4.ip_forward = 1" WRONG grep -qx 1 /proc/sys/net/ipv4/ip_forward
check "ip_forward user $CLUSTER ($IP_FORWARD_DIR/users)" MISSING test -f "$IP_FORWARD_DIR/users/$CLUSTER"

# Routes to the other hosts' container subnets (several hosts).
read -ra routes <<< "${ROUTES:-}"
for route in "${routes[@]}"; do
  IFS=, read -r subnet via _ <<< "$route"
  check "route $subnet via $via" MISSING /bin/sh -c 'ip -4 route show "$1" | grep -q "via $2 "' sh "$subnet" "$via"
done

# The shared filesystem (shared_fs): its server where this host serves it, its mount on every host.
if [ -n "${NFS_SERVER:-}" ]; then
  IFS=, read -r nfs_dir nfs_address nfs_port <<< "$NFS_SERVER"
  nfs_pid=$(nfs_server_pid "$nfs_dir")
  [ -n "$nfs_pid" ] && ok "NFS server (pid $nfs_pid) at $nfs_address:$nfs_port" ||
    bad MISSING "NFS server at $nfs_address:$nfs_port (no live ganesha.nfsd behind $nfs_dir/ganesha.pid)"
fi
if [ -n "${SHARED_MOUNT:-}" ]; then
  IFS=, read -r _ nfs_server _ nfs_export nfs_mount _ <<< "$SHARED_MOUNT"
  check "mount of $nfs_server:$nfs_export at $nfs_mount" MISSING mountpoint -q "$nfs_mount"
fi

# iptables: every expected rule, nothing else carrying one of the cluster's tags.
expected_rules=$(
  nat_rules "$CLUSTER" "$NAT_BRIDGE" "$NAT_SUBNET"
  inbound_rules "$CLUSTER" "$NAT_BRIDGE" "${BURST_ACCESS:-}"
  inbound_rules "$CLUSTER" "$CLUSTER_BRIDGE" ""
  for route in "${routes[@]}"; do
    IFS=, read -r subnet via kind <<< "$route"
    route_rules "$CLUSTER" "$NAT_BRIDGE" "$NAT_SUBNET" "$subnet" "$via" "$kind"
  done
  for forward in $FORWARDS; do
    IFS=, read -r tag host_port address port sources <<< "$forward"
    forward_rules "$tag" "$host_port" "$address" "$port" "$sources"
  done
  for guard in ${EXPORTER_GUARD:-} ${NFS_GUARD:-}; do
    guard_rules "$guard"
  done
)
while read -r rule; do
  check "iptables rule: $rule" MISSING rule_present "$rule"
done <<< "$expected_rules"
tags=$(grep -oE -- '--comment [^ ]+' <<< "$expected_rules" | sort | uniq -c)
while read -r count _ tag; do
  found=$(tagged_rule_count "$tag")
  [ "$found" -le "$count" ] || bad FOREIGN "$((found - count)) more iptables rule(s) tagged $tag than the cluster made"
done <<< "$tags"
while read -r table; do
  while read -r rule; do
    tag=$(grep -oE -- "--comment \"?$owner:[^ \"]+" <<< "$rule" | sed 's/--comment "\{0,1\}//')
    grep -qF -- "--comment $tag " <<< "$expected_rules" || bad FOREIGN "iptables rule with an unknown tag ($table): $rule"
  done < <(iptables -w 30 -t "$table" -S | grep -E -- "--comment \"?$owner:" || true)
done <<< $'nat\nfilter'

# Each bridge's refusal of new connections: after the cluster's accepts into it, before any
# cluster's accept of its containers' traffic out (which would let another cluster's in).
for bridge in "$NAT_BRIDGE" "$CLUSTER_BRIDGE"; do
  while read -r misplaced; do
    [ -z "$misplaced" ] || bad WRONG "$bridge: $misplaced"
  done <<< "$(inbound_misplaced "$CLUSTER" "$bridge")"
done

# Forwards: no rule above ours takes their traffic (the chain is named).
for forward in $FORWARDS; do
  IFS=, read -r tag host_port address port sources <<< "$forward"
  while read -r shadow; do
    [ -z "$shadow" ] || bad SHADOWED "$shadow"
  done <<< "$(forward_shadows "$tag" "$host_port" "$address" "$port" "$sources")"
done

# Containers: the image (built, stopped) and every node and the web app, ours and running.
if ! lxc_exists "$IMAGE"; then
  bad MISSING "node image $IMAGE"
elif [ "$(lxc_owner "$IMAGE")" != "$CLUSTER" ]; then
  bad FOREIGN "node image $IMAGE (owner '$(lxc_owner "$IMAGE")')"
else
  check "node image $IMAGE built" WRONG test -f "$(lxc_dir "$IMAGE")/gpucluster-image-ready"
fi
for container in $NODE_CONTAINERS $WEB_CONTAINER ${LOGIN_CONTAINER:-}; do
  if ! lxc_exists "$container"; then
    bad MISSING "container $container"
  elif [ "$(lxc_owner "$container")" != "$CLUSTER" ]; then
    bad FOREIGN "container $container (owner '$(lxc_owner "$container")'$(lxc_pending "$CLUSTER_DIR" "$container" && echo ', half-made by an interrupted run'))"
  elif ! lxc_running "$container"; then
    bad WRONG "container $container is $(lxc-info -n "$container" -sH 2>/dev/null || echo unknown), not RUNNING"
  else
    ok "container $container running"
    service=slurmd
    [ "$container" != "$WEB_CONTAINER" ] || service=gpu-web-app
    [ "$container" != "${LOGIN_CONTAINER:-}" ] || service=ssh
    check "$service active in $container" WRONG in_ct "$container" systemctl is-active --quiet "$service"
    [ "$container" != "$CONTROLLER_CONTAINER" ] ||
      check "slurmctld active in $container" WRONG in_ct "$container" systemctl is-active --quiet slurmctld
  fi
done

# A service container of the cluster's: ours, running, its services active.
service_container_check() { # WHAT CONTAINER SERVICE...
  local what=$1 container=$2 service
  shift 2
  if ! lxc_exists "$container"; then
    bad MISSING "$what container $container"
  elif [ "$(lxc_owner "$container")" != "$CLUSTER" ]; then
    bad FOREIGN "$what container $container (owner '$(lxc_owner "$container")')"
  elif ! lxc_running "$container"; then
    bad WRONG "$what container $container is not RUNNING"
  else
    ok "$what container $container running"
    for service; do
      check "$service active in $container" WRONG in_ct "$container" systemctl is-active --quiet "$service"
    done
  fi
}
# The accounting database (MariaDB, slurmdbd), Prometheus, the stack's registry (both ports).
[ -z "${DB_CONTAINER:-}" ] || service_container_check accounting "$DB_CONTAINER" mariadb slurmdbd
[ -z "${METRICS_CONTAINER:-}" ] || service_container_check metrics "$METRICS_CONTAINER" prometheus
[ -z "${REGISTRY_CONTAINER:-}" ] ||
  service_container_check registry "$REGISTRY_CONTAINER" gpucluster-registry-pull gpucluster-registry-push
if [ -n "${METRICS_EXPORTER:-}" ]; then
  pid=$(daemon_pid "$METRICS_EXPORTER/exporter.pid" python3 "$METRICS_EXPORTER/slurm_exporter.py")
  [ -n "$pid" ] && ok "cluster exporter (pid $pid)" ||
    bad MISSING "cluster exporter (no live $METRICS_EXPORTER/slurm_exporter.py behind $METRICS_EXPORTER/exporter.pid)"
fi

# Host daemons: by pid file AND identity (a reused pid is not ours), and answering.
if [ ! -s "$MUNGE_KEY_FILE" ]; then
  bad MISSING "munge key $MUNGE_KEY_FILE"
else
  perms=$(stat -c '%a %U:%G' "$MUNGE_KEY_FILE")
  [ "$perms" = "400 root:root" ] && ok "munge key $MUNGE_KEY_FILE (0400 root:root)" ||
    bad WRONG "munge key $MUNGE_KEY_FILE is $perms, not 400 root:root"
fi
# The host's Slurm client: wrappers running the node image's commands in a container here.
if [ -x "$CLUSTER_DIR/bin/scontrol" ]; then
  check "slurmctld answers the cluster's client ($CLUSTER_DIR/bin/scontrol ping, the node image's)" WRONG \
    /bin/sh -c 'timeout 20 "$1" ping | grep -q "is UP"' sh "$CLUSTER_DIR/bin/scontrol"
else
  bad MISSING "the cluster's Slurm client $CLUSTER_DIR/bin (made by its slurm-client resource)"
fi

# Stand-in GPUs (gpu.stand_in): character devices 195:N in the cluster's device directory.
if [ -n "${STAND_IN_GPUS:-}" ]; then
  IFS=, read -r device_dir count <<< "$STAND_IN_GPUS"
  for ((i = 0; i <= count; i++)); do
    name=nvidia$i minor=$i
    [ "$i" -lt "$count" ] || { name=nvidiactl; minor=255; }
    check "stand-in GPU $device_dir/$name (195:$minor)" MISSING \
      /bin/sh -c '[ -c "$1" ] && [ "$(stat -c %t:%T "$1")" = "$2" ]' sh "$device_dir/$name" "$(printf 'c3:%x' "$minor")"
  done
fi

# The web app's cluster-status writer: by pid file and identity, and its snapshot fresh.
if [ -n "${STATUS_WRITER:-}" ]; then
  IFS=, read -r status_dir interval <<< "$STATUS_WRITER"
  pid=$(daemon_pid "$CLUSTER_DIR/cluster-status.pid" python3 "$CLUSTER_DIR/cluster-status.py")
  if [ -z "$pid" ]; then
    bad MISSING "cluster-status writer (no live $CLUSTER_DIR/cluster-status.py behind $CLUSTER_DIR/cluster-status.pid)"
  else
    check "cluster-status writer (pid $pid) wrote $status_dir/cluster.json in the last $((3 * interval)) s" WRONG \
      /bin/sh -c '[ $(($(date +%s) - $(stat -c %Y "$1"))) -le "$2" ]' sh "$status_dir/cluster.json" "$((3 * interval))"
  fi
fi

# Boot persistence: the bring-up, its description (as the config says now) and the unit.
check "boot script $CLUSTER_DIR/boot.sh" MISSING test -s "$CLUSTER_DIR/boot.sh"
if [ ! -f "$CLUSTER_DIR/host-state.env" ]; then
  bad MISSING "host state $CLUSTER_DIR/host-state.env"
else
  check "host state $CLUSTER_DIR/host-state.env matches the config" WRONG cmp -s "$expected" "$CLUSTER_DIR/host-state.env"
fi
if [ -d "$(dirname "$BOOT_UNIT")" ]; then
  check "boot unit $BOOT_UNIT" MISSING test -f "$BOOT_UNIT"
  check "boot unit enabled (multi-user.target.wants)" MISSING \
    test -L "$(dirname "$BOOT_UNIT")/multi-user.target.wants/$(basename "$BOOT_UNIT")"
else
  ok "no systemd unit directory: the boot script runs from the host's own init"
fi

if [ "$drift" = 0 ]; then
  echo "no drift: cluster $CLUSTER is on this host as its config says"
else
  # `pulumi up` would not repair it: with unchanged inputs pulumi-command runs no script again.
  echo "drift: cluster $CLUSTER differs from its config (see the lines above)."
  echo "  bridges, rules, routes, daemons, containers: run the boot script, /bin/bash $CLUSTER_DIR/boot.sh $CLUSTER_DIR/host-state.env (stack output boot_command)"
  echo "  a damaged node container or image: ./up.sh STACK --replace URN (./pulumi.sh stack --show-urns --stack STACK lists them); see docs/reboot-and-drift.md"
fi
exit "$drift"
