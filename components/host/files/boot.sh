# Bring the cluster's host state back after a boot, as the create scripts made it: bridges
# with their addresses, ip_forward, the iptables rules, routes to the other hosts (several
# hosts), the host munged (and slurmctld when it runs on the host), then the containers,
# whose daemons are systemd units inside them.
# Idempotent: what is already there is left alone. Usage: boot.sh HOST_STATE_FILE
load_host_state "${1:?usage: boot.sh HOST_STATE_FILE}"
require CLUSTER CLUSTER_DIR NAT_BRIDGE NAT_ADDRESS NAT_SUBNET CLUSTER_BRIDGE FORWARDS MUNGE_KEY_FILE \
  MUNGE_SOCKET SLURM_CONF_PATH CONTROLLER_CONF IMAGE NODE_CONTAINERS WEB_CONTAINER
bridge_up "$CLUSTER" "$NAT_BRIDGE" "$NAT_ADDRESS"
bridge_up "$CLUSTER" "$CLUSTER_BRIDGE" ""
ip_forward_acquire "$CLUSTER"
nat_rules "$CLUSTER" "$NAT_BRIDGE" "$NAT_SUBNET" | rules_up "gpucluster:$CLUSTER:bridge:$NAT_BRIDGE" append
for forward in $FORWARDS; do
  IFS=, read -r tag host_port address port sources <<< "$forward"
  forward_up "$tag" "$host_port" "$address" "$port" "$sources"
done
# With several hosts: routes to the other hosts' container subnets (SUBNET,VIA ...).
read -ra routes <<< "${ROUTES:-}"
[ "${#routes[@]}" = 0 ] || routes_up "$CLUSTER" "$NAT_BRIDGE" "$NAT_SUBNET" "${routes[@]}"
log "$CLUSTER: bridges, ip_forward, routes and firewall rules in place"
cluster_munged_up "$MUNGE_KEY_FILE" "$MUNGE_SOCKET" "$CLUSTER_DIR/munge"
# The accounting database before slurmctld: a slurmctld whose slurmdbd does not answer when it
# starts exits (in a container, its unit restarts it; on the host, wait here).
if [ -n "${DB_CONTAINER:-}" ]; then
  [ "$(lxc_owner "$DB_CONTAINER")" = "$CLUSTER" ] || die "LXC container $DB_CONTAINER is missing or not this cluster's"
  lxc_running "$DB_CONTAINER" || lxc-start -n "$DB_CONTAINER" -d >&2
  [ -z "$CONTROLLER_CONF" ] ||
    wait_until 180 "slurmdbd in $DB_CONTAINER" env SLURM_CONF="$SLURM_CONF_PATH" sacctmgr -n show cluster
fi
[ -z "$CONTROLLER_CONF" ] || host_slurmctld_up "$CLUSTER_DIR" "$CONTROLLER_CONF"
log "$CLUSTER: host daemons running"
for container in ${DB_CONTAINER:-} $NODE_CONTAINERS $WEB_CONTAINER; do
  [ "$(lxc_owner "$container")" = "$CLUSTER" ] || die "LXC container $container is missing or not this cluster's"
  lxc_running "$container" || lxc-start -n "$container" -d >&2
done
for container in ${DB_CONTAINER:-} $NODE_CONTAINERS $WEB_CONTAINER; do
  lxc-wait -n "$container" -s RUNNING -t 60
done
log "$CLUSTER: containers running: ${DB_CONTAINER:-} $NODE_CONTAINERS $WEB_CONTAINER"
