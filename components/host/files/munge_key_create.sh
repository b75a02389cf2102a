# The cluster's munge key: random, created once on the host, readable by root only.
# A key already there is trusted only when nobody but root could have written it: a regular
# file owned by root with mode 0400, in a root-owned directory no one else can write to.
require MUNGE_KEY_FILE
key_dir=$(dirname "$MUNGE_KEY_FILE")
if [ -e "$key_dir" ]; then
  [ "$(stat -c %u "$key_dir")" = 0 ] && [ $((8#$(stat -c %a "$key_dir") & 8#022)) = 0 ] ||
    die "$key_dir (host.state_dir) is not root-owned or is writable by others; a munge key there cannot be trusted"
fi
if [ -e "$MUNGE_KEY_FILE" ] || [ -L "$MUNGE_KEY_FILE" ]; then
  [ -f "$MUNGE_KEY_FILE" ] && [ ! -L "$MUNGE_KEY_FILE" ] && [ "$(stat -c '%u %a' "$MUNGE_KEY_FILE")" = "0 400" ] &&
    [ -s "$MUNGE_KEY_FILE" ] ||
    die "munge key $MUNGE_KEY_FILE exists but is not a non-empty regular file owned by root with mode 0400; remove it to have a new key made"
  exit 0
fi
mkdir -p "$key_dir"
umask 077
head -c 1024 /dev/urandom > "$MUNGE_KEY_FILE.new"
chmod 0400 "$MUNGE_KEY_FILE.new"
mv -f "$MUNGE_KEY_FILE.new" "$MUNGE_KEY_FILE"
