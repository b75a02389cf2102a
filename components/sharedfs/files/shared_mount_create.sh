# Mount the cluster's export at the host's shared directory, before any node binds it (the
# boot unit mounts it again at boot, after the network and the server are up). The guard
# keeps the host's containers from speaking NFS to the server themselves.
require CLIENT SERVER PORT EXPORT SHARED_DIR STATE_DIR NFS_GUARD
guard_up "$NFS_GUARD"
if [ "$CLIENT" = stand_in ]; then
  require CLIENT_TEXT
  printf '%s' "$CLIENT_TEXT" | write_if_changed "$STATE_DIR/nfs-client.py" 0644 || true
fi
shared_mount_up "$CLIENT" "$SERVER" "$PORT" "$EXPORT" "$SHARED_DIR" "$STATE_DIR"
log "mounted $SERVER:$EXPORT at $SHARED_DIR"
