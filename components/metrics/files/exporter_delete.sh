# Stop the cluster's exporter, remove its files and its guard; succeed when they are gone.
require CLUSTER_DIR EXPORTER_GUARD
dir="$CLUSTER_DIR/metrics"
pid=$(daemon_pid "$dir/exporter.pid" python3 "$dir/slurm_exporter.py")
[ -z "$pid" ] || stop_daemon "$pid" "the cluster exporter"
rm -rf "$dir"
guard_down "$EXPORTER_GUARD"
