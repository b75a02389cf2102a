require MUNGE_KEY_FILE
rm -f "$MUNGE_KEY_FILE" "$MUNGE_KEY_FILE.new"
# The controller's saved queue, the records of its moves' forwards (their rules went with its
# container) and the health gate's mark live as long as the cluster's key.
dir=$(dirname "$MUNGE_KEY_FILE")
rm -rf "$dir/slurmctld" "$dir/controller-forwards" "$dir/health-passed"
# The job ids carried across a Slurm release change (restore_ct_slurmctld) go with that queue;
# with accounting its delete removes the file first (the database's).
rm -f "$dir/accounting/first-job-id"
rmdir "$dir/accounting" 2>/dev/null || true
