# MariaDB in the accounting container, its data on the host (DATA_DIR, bound at /var/lib/mysql),
# listening on localhost only: slurmdbd beside it is its only client. A new data directory is
# initialised here, and, with accounting.restore, loaded from the kept dump. The database's
# slurm user gets the cluster's password on stdin, never in an argument.
require CLUSTER CONTAINER PASSWORD_FILE MYSQL_CONF_TEXT RESTORE KEPT_DUMP FIRST_JOB_ID_FILE
report_clone "$CONTAINER"
[ -s "$PASSWORD_FILE" ] || die "database password $PASSWORD_FILE is missing (made by the accounting data resource)"
if ! in_ct "$CONTAINER" test -d /var/lib/mysql/mysql; then
  log "initialising a new database directory"
  in_ct "$CONTAINER" chown mysql:mysql /var/lib/mysql
  in_ct "$CONTAINER" mariadb-install-db --user=mysql --datadir=/var/lib/mysql --skip-test-db \
    --auth-root-authentication-method=socket >&2
fi
changed=1
printf '%s' "$MYSQL_CONF_TEXT" |
  ct_write_if_changed "$CONTAINER" /etc/mysql/mariadb.conf.d/90-gpucluster.cnf 0644 root:root && changed=0
in_ct "$CONTAINER" systemctl enable --quiet mariadb
if [ "$changed" = 0 ] || ! in_ct "$CONTAINER" systemctl is-active --quiet mariadb; then
  in_ct "$CONTAINER" systemctl restart mariadb
fi
wait_until 60 "MariaDB in $CONTAINER" in_ct "$CONTAINER" mariadb-admin ping
if [ "$RESTORE" = yes ] && ! in_ct "$CONTAINER" test -d /var/lib/mysql/slurm_acct_db; then
  if [ -s "$KEPT_DUMP" ]; then
    log "restoring the accounting database from $KEPT_DUMP"
    gunzip -c "$KEPT_DUMP" | in_ct "$CONTAINER" mariadb
    # The new slurmctld numbers its jobs after the restored ones (FirstJobId), so no restored
    # record is hidden behind a new job with the same id.
    if next=$(in_ct "$CONTAINER" mariadb -N -B -e \
      "SELECT COALESCE(MAX(id_job), 0) + 1 FROM slurm_acct_db.\`${CLUSTER}_job_table\`"); then
      printf '%s\n' "$next" > "$FIRST_JOB_ID_FILE"
      log "the restored cluster numbers its jobs from $next"
    fi
  else
    log "accounting.restore: no dump at $KEPT_DUMP, starting with an empty accounting database"
  fi
fi
password=$(< "$PASSWORD_FILE")
# The database is made here, not by slurmdbd: 24.11's slurmdbd with trixie's MariaDB 11.8
# client fails its first query after creating it ("Number of columns in result ... exceeds
# maximum allowed") and exits; with the database there it starts.
printf "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '%s';
ALTER USER 'slurm'@'localhost' IDENTIFIED BY '%s';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
FLUSH PRIVILEGES;\n" "$password" "$password" | in_ct "$CONTAINER" mariadb
