# The cluster's munge key on this host, from stdin (base64; generated once per cluster and kept
# only as an encrypted Pulumi secret): 0400 root, rewritten only when it differs. Never printed.
require MUNGE_KEY_FILE
# The cluster's directory with the usual modes (other commands' daemons, the status writer as
# nobody, go through it); only the key's own files are private.
mkdir -p "$(dirname "$MUNGE_KEY_FILE")"
umask 077
tmp=$(mktemp "$MUNGE_KEY_FILE.XXXXXX")
trap 'rm -f "$tmp"' EXIT
base64 -d > "$tmp" || die "stdin is not the base64 munge key"
[ "$(stat -c %s "$tmp")" -ge 32 ] || die "the munge key on stdin is shorter than 32 bytes"
chmod 0400 "$tmp"
if [ -f "$MUNGE_KEY_FILE" ] && cmp -s "$tmp" "$MUNGE_KEY_FILE"; then exit 0; fi
mv -f "$tmp" "$MUNGE_KEY_FILE"
