# The accounting database's container: a service container (MariaDB and slurmdbd installed by
# LXC's Debian template; lib/service_container.sh) on the NAT bridge, with the database's data
# directory bound in from the host so it outlives the container.
require CLUSTER CLUSTER_DIR CONTAINER NODE_HOSTNAME LXC_CONFIG NAT_ADDRESS RELEASE PACKAGES DATA_DIR
exec 3>&1 1>&2
[ -d "$DATA_DIR" ] || die "data directory $DATA_DIR is missing (made by the accounting data resource)"
# Renamed (accounting.name changed): the previous run printed the old name, which the engine
# hands back on update. Same address and the same data directory: the old container (its
# MariaDB shut down cleanly) goes before the new one is made.
previous=${PULUMI_COMMAND_STDOUT:-}
if [ -n "$previous" ] && [ "$previous" != "$CONTAINER" ] && lxc_exists "$previous" &&
  [ "$(lxc_owner "$previous")" = "$CLUSTER" ]; then
  log "renamed from $previous: removing it"
  lxc-stop -n "$previous" -t 60 || lxc-stop -n "$previous" -k || true
  lxc-destroy -n "$previous" -f
fi
# slurmdbd starts once configured, with the cluster's munge key (none from the package).
without_munge_key() {
  rm -f "$1/etc/munge/munge.key" "$1"/etc/systemd/system/multi-user.target.wants/{munge,slurmdbd}.service
}
service_container_up without_munge_key
printf '%s\n' "$CONTAINER" >&3
