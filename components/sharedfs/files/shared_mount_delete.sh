# Unmount the export from this host; the files stay on the server.
require SHARED_DIR STATE_DIR
shared_mount_down "$SHARED_DIR" "$STATE_DIR"
rm -f "$STATE_DIR/nfs-client.py" "$STATE_DIR/nfs-client.log"
