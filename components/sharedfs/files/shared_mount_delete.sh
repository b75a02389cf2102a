# Unmount the export from this host and remove the host's NFS guard; the files stay on the server.
require SHARED_DIR STATE_DIR NFS_GUARD
shared_mount_down "$SHARED_DIR" "$STATE_DIR"
rm -f "$STATE_DIR/nfs-client.py" "$STATE_DIR/nfs-client.log"
guard_down "$NFS_GUARD"
