# Serve the cluster's export from this host with NFS-Ganesha, a daemon of the cluster's own
# (its config, pid file, log and recovery directory in CONF_DIR): the host's own NFS setup,
# if any, is left alone. The directory is made (mode 1777, like /tmp: with root squashed,
# every user makes their own directory there) only where it is missing.
# It is marked as the cluster's when made here, or when the cluster serves it already (an
# apply of an older release made it), so the preflight serves it again after a destroy.
require CLUSTER CONF_DIR CONFIG_TEXT DIRECTORY ADDRESS PORT
if [ ! -d "$DIRECTORY" ]; then
  mkdir -p "$DIRECTORY"
  chmod 1777 "$DIRECTORY"
  echo "$CLUSTER" > "$DIRECTORY/$SERVED_MARKER"
elif [ ! -e "$DIRECTORY/$SERVED_MARKER" ] && grep -qxF "  Path = $DIRECTORY;" "$CONF_DIR/ganesha.conf" 2>/dev/null; then
  echo "$CLUSTER" > "$DIRECTORY/$SERVED_MARKER"
fi
restart=no
printf '%s' "$CONFIG_TEXT" | write_if_changed "$CONF_DIR/ganesha.conf" 0644 && restart=yes
pid=$(nfs_server_pid "$CONF_DIR")
if [ -n "$pid" ] && [ "$restart" = yes ]; then
  # A new config (clients, squashing) takes effect on a restart; mounts reconnect.
  stop_daemon "$pid" "the NFS server"
fi
nfs_server_up "$CONF_DIR" "$ADDRESS" "$PORT"
log "serving $DIRECTORY at $ADDRESS:$PORT"
