# Stop serving: the server and its config go; the served directory and every file in it stay
# (docs/hosts.md says where they are and how to remove them).
require CONF_DIR DIRECTORY
pid=$(nfs_server_pid "$CONF_DIR")
[ -z "$pid" ] || stop_daemon "$pid" "the NFS server"
rm -rf "$CONF_DIR"
log "kept $DIRECTORY and its files"
