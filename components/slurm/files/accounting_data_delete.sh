# Destroy, or accounting turned off: the dump the database's delete has just written moves to
# the kept directory (unless accounting.keep_dump is false), then the data directory and the
# password go. Without a dump (the database was not running), a kept copy is the raw data
# directory itself.
require CLUSTER DATA_DIR PASSWORD_FILE PENDING_DUMP KEEP_DUMP KEPT_DUMP FIRST_JOB_ID_FILE
base=$(dirname "$DATA_DIR")
if [ "$KEEP_DUMP" = yes ]; then
  kept_dir=$(dirname "$KEPT_DUMP")
  if [ -s "$PENDING_DUMP" ]; then
    mkdir -p "$kept_dir"
    mv -f "$PENDING_DUMP" "$KEPT_DUMP"
    chmod 0600 "$KEPT_DUMP"
    log "kept a dump of the accounting database: $KEPT_DUMP (accounting.restore: true loads it into a new cluster; ./purge-kept.sh $CLUSTER removes it)"
  elif [ -d "$DATA_DIR/slurm_acct_db" ]; then
    mkdir -p "$kept_dir"
    rm -rf "$kept_dir/mysql-data"
    mv "$DATA_DIR" "$kept_dir/mysql-data"
    log "the accounting database was not running, no dump: kept its raw data directory (MariaDB) at $kept_dir/mysql-data"
  fi
elif [ -s "$PENDING_DUMP" ] || [ -d "$DATA_DIR/slurm_acct_db" ]; then
  log "accounting.keep_dump is false: the accounting database is dropped"
fi
rm -rf "$DATA_DIR" "$PASSWORD_FILE" "$PENDING_DUMP" "$FIRST_JOB_ID_FILE"
rmdir "$base" 2>/dev/null || true
