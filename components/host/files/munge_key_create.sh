# The cluster's munge key: random, created once on the host, readable by root only.
require MUNGE_KEY_FILE
[ -s "$MUNGE_KEY_FILE" ] && exit 0
mkdir -p "$(dirname "$MUNGE_KEY_FILE")"
umask 077
head -c 1024 /dev/urandom > "$MUNGE_KEY_FILE.new"
chmod 0400 "$MUNGE_KEY_FILE.new"
mv -f "$MUNGE_KEY_FILE.new" "$MUNGE_KEY_FILE"
