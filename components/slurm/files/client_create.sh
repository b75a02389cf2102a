# Slurm client access from the host: a munged of this cluster on its private socket, and
# slurm.conf in the cluster directory (use with SLURM_CONF=...). The host's own munge and
# /etc/slurm are not touched.
require CLUSTER_DIR MUNGE_KEY_FILE MUNGE_SOCKET SLURM_CONF_PATH SLURM_CONF_TEXT
[ -s "$MUNGE_KEY_FILE" ] || die "munge key $MUNGE_KEY_FILE is missing"
printf '%s' "$SLURM_CONF_TEXT" | write_if_changed "$SLURM_CONF_PATH" 0644 || true
state="$CLUSTER_DIR/munge"
mkdir -p "$state" "$(dirname "$MUNGE_SOCKET")"
pid=$(cat "$state/munged.pid" 2>/dev/null || true)
if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then
  munged --socket="$MUNGE_SOCKET" --key-file="$MUNGE_KEY_FILE" --pid-file="$state/munged.pid" \
    --seed-file="$state/munged.seed" --log-file="$state/munged.log" --force
fi
wait_until 15 "the cluster's munged on the host" /bin/sh -c 'munge -S "$1" -n | unmunge -S "$1"' sh "$MUNGE_SOCKET"
