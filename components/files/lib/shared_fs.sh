# the cluster's shared filesystem: the NFS server one host serves it from, and each host's mount
# nfs_server_up CONF_DIR ADDRESS PORT: the cluster's NFS-Ganesha (CONF_DIR/ganesha.conf) answering.
nfs_server_up() {
  local dir=$1 address=$2 port=$3
  [ -f "$dir/ganesha.conf" ] || die "NFS server config $dir/ganesha.conf is missing"
  mkdir -p "$dir/recovery"
  if [ -z "$(nfs_server_pid "$dir")" ]; then
    detached ganesha.nfsd -f "$dir/ganesha.conf" -p "$dir/ganesha.pid" -L "$dir/ganesha.log" -N NIV_EVENT
  fi
  wait_until 30 "the NFS server at $address:$port" tcp_connects "$address" "$port"
}

# The served directory's marker: the cluster that made it (a root-owned file in a sticky
# directory: no user can remove it), so a later apply, after a destroy too, serves it again.
SERVED_MARKER=.gpucluster-served

# served_directory_problem DIR CLUSTER CONF_DIR: one line when DIR exists with files that this
# cluster did not make (no marker of it, not what its server config at CONF_DIR serves):
# serving would hand them read-write to every host and node.
served_directory_problem() {
  local dir=$1 cluster=$2 conf=$3/ganesha.conf count
  [ -d "$dir" ] || return 0
  [ "$(cat "$dir/$SERVED_MARKER" 2>/dev/null)" != "$cluster" ] || return 0
  grep -qxF "  Path = $dir;" "$conf" 2>/dev/null && return 0
  count=$(find "$dir" -mindepth 1 -maxdepth 1 -printf . | wc -c)
  [ "$count" = 0 ] && return 0
  echo "shared_fs.directory: $dir already exists and holds $count entries the cluster did not make (e.g." \
    "$(find "$dir" -mindepth 1 -maxdepth 1 -printf '%f\n' | sort | head -n 3 | paste -sd, -)); serving it would" \
    "export them read-write to every host and node: choose a new or empty directory, or set" \
    "shared_fs.adopt_existing: true to serve them"
}

nfs_server_pid() { daemon_pid "$1/ganesha.pid" ganesha.nfsd "$1/ganesha.conf"; }

# shared_mount_up CLIENT SERVER PORT EXPORT DIR STATE_DIR: the export mounted at DIR, by the
# kernel (mount -t nfs4) or by the stand-in client (STATE_DIR holds its program, pid and log).
# Waits for the server (it may still be booting): a mount that fails is tried again.
shared_mount_up() {
  local client=$1 server=$2 port=$3 export=$4 dir=$5 state=$6
  mkdir -p "$dir"
  mountpoint -q "$dir" && return 0
  [ -z "$(ls -A "$dir")" ] || die "$dir is not empty: the shared filesystem is mounted there over nothing"
  wait_until 120 "the NFS server $server:$port" tcp_connects "$server" "$port"
  if [ "$client" = kernel ]; then
    wait_until 60 "mount of $server:$export at $dir" \
      mount -t nfs4 -o "port=$port,hard,_netdev" "$server:$export" "$dir"
    return 0
  fi
  [ -f "$state/nfs-client.py" ] || die "stand-in NFS client $state/nfs-client.py is missing"
  # A daemon of no deploy, its log beside it; it ends when the directory is unmounted.
  detached --background "$state/nfs-client.pid" "$state/nfs-client.log" \
    /usr/bin/python3 "$state/nfs-client.py" "$server" "$port" "$export" "$dir"
  wait_until 60 "the stand-in NFS client's mount at $dir (log: $state/nfs-client.log)" mountpoint -q "$dir"
}

# shared_mount_down DIR STATE_DIR: unmount DIR (a busy mount is detached: nothing of the cluster
# uses it any more), then wait for the stand-in client, if any, to end.
shared_mount_down() {
  local dir=$1 state=$2 pid
  if mountpoint -q "$dir"; then
    umount "$dir" 2>/dev/null || umount -l "$dir"
  fi
  pid=$(daemon_pid "$state/nfs-client.pid" /usr/bin/python3 "$state/nfs-client.py")
  [ -z "$pid" ] || stop_daemon "$pid" "the stand-in NFS client"
  rm -f "$state/nfs-client.pid"
}
