# Before MariaDB stops, a dump of the accounting database to the host (PENDING_DUMP), whether
# the cluster is destroyed or only the container replaced (its data directory stays); the
# data resource's delete decides what destroy keeps. Nothing to do once the container is gone.
require CONTAINER PENDING_DUMP
created_in_this_clone "$CONTAINER" || exit 0
lxc_exists "$CONTAINER" && lxc_running "$CONTAINER" || exit 0
if in_ct "$CONTAINER" test -d /var/lib/mysql/slurm_acct_db; then
  in_ct "$CONTAINER" systemctl start mariadb
  wait_until 60 "MariaDB in $CONTAINER" in_ct "$CONTAINER" mariadb-admin ping
  in_ct "$CONTAINER" mariadb-dump --single-transaction --databases slurm_acct_db | gzip > "$PENDING_DUMP.new"
  mv -f "$PENDING_DUMP.new" "$PENDING_DUMP"
  log "dumped the accounting database to $PENDING_DUMP"
fi
in_ct "$CONTAINER" systemctl disable --now --quiet mariadb || true
