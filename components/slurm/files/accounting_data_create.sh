# The accounting database's home on the host: its data directory (bound into the database's
# container, so the data outlives the container) and the password of the database's slurm
# user: random, made once per cluster, 0400 root, never in the repository, the Pulumi state, a
# log or a command line (it reaches MariaDB and slurmdbd.conf on stdin).
require DATA_DIR PASSWORD_FILE
mkdir -p "$DATA_DIR"
chmod 0700 "$(dirname "$DATA_DIR")"
[ -s "$PASSWORD_FILE" ] && exit 0
umask 077
head -c 64 /dev/urandom | base64 -w0 | tr -dc 'A-Za-z0-9' | head -c 32 > "$PASSWORD_FILE.new"
chmod 0400 "$PASSWORD_FILE.new"
mv -f "$PASSWORD_FILE.new" "$PASSWORD_FILE"
