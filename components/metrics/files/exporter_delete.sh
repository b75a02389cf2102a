# Stop the cluster's exporter and remove its files; succeed when they are gone.
require CLUSTER_DIR
dir="$CLUSTER_DIR/metrics"
pid=$(daemon_pid "$dir/exporter.pid" python3 "$dir/slurm_exporter.py")
[ -z "$pid" ] || stop_daemon "$pid" "the cluster exporter"
rm -rf "$dir"
