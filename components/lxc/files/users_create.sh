# The cluster's people in one container: the same names, uids and gids as on the host.
# The container records whom it made (USERS_RECORD), so only those are ever removed.
require CONTAINER USERS USERS_RECORD
report_clone "$CONTAINER"
mapfile -t specs < <(lines "$USERS")
users_in_ct "$CONTAINER" "$USERS_RECORD" "${specs[@]}" || die "people of users[] clash with those of $CONTAINER (see above)"
