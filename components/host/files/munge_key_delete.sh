require MUNGE_KEY_FILE
rm -f "$MUNGE_KEY_FILE" "$MUNGE_KEY_FILE.new"
# The controller's saved queue and the health gate's mark live as long as the cluster's key.
dir=$(dirname "$MUNGE_KEY_FILE")
rm -rf "$dir/slurmctld" "$dir/health-passed"
