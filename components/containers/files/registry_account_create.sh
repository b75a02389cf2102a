# The stack's registry's push account: its htpasswd file (bcrypt) in the registry's data
# directory, written again only when the password or the name no longer match it (the
# registry reads a changed file at the next request). The password comes on stdin only.
require CONTAINER DATA_IN_CONTAINER PUSH_USERNAME
password=$(cat)
[ -n "$password" ] || die "the registry's push password is empty (containers.registry.push_password_secret)"
file=$DATA_IN_CONTAINER/htpasswd
if ! printf '%s' "$password" | in_ct "$CONTAINER" htpasswd -iv "$file" "$PUSH_USERNAME" >/dev/null 2>&1; then
  printf '%s' "$password" | in_ct "$CONTAINER" sh -c '
    set -eu; umask 027; htpasswd -iBc "$1.new" "$2" 2>/dev/null
    chgrp docker-registry "$1.new"; mv -f "$1.new" "$1"' sh "$file" "$PUSH_USERNAME"
  log "registry: the push account $PUSH_USERNAME is set"
fi
