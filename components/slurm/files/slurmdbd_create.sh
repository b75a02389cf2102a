# slurmdbd beside MariaDB: munge with the cluster's key, slurmdbd.conf (0600 slurm, the
# database password appended here from the host's file), then the daemon. Once it answers,
# the cluster is registered in the database (sacctmgr: the host's wrapper, the node image's),
# before slurmctld first connects.
require CLUSTER CLUSTER_DIR CONTAINER SLURMDBD_CONF_TEXT PASSWORD_FILE
report_clone "$CONTAINER"
[ -s "$PASSWORD_FILE" ] || die "database password $PASSWORD_FILE is missing (made by the accounting data resource)"
ct_setup_munge "$CONTAINER" || true
in_ct "$CONTAINER" install -d -o slurm -g slurm /var/log/slurm
changed=1
password=$(< "$PASSWORD_FILE")
printf '%sStoragePass=%s\n' "$SLURMDBD_CONF_TEXT" "$password" |
  ct_write_if_changed "$CONTAINER" /etc/slurm/slurmdbd.conf 0600 slurm:slurm && changed=0
unset password
in_ct "$CONTAINER" systemctl enable --quiet slurmdbd
if [ "$changed" = 0 ] || ! in_ct "$CONTAINER" systemctl is-active --quiet slurmdbd; then
  in_ct "$CONTAINER" systemctl restart slurmdbd
fi
use_cluster_slurm
wait_until 90 "slurmdbd in $CONTAINER to answer" sacctmgr -n show cluster
if ! sacctmgr -nP show cluster format=cluster | grep -qxF "$CLUSTER"; then
  sacctmgr -i add cluster "$CLUSTER" >&2
fi
