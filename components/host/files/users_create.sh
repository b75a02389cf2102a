# The cluster's people on the host, with the names, uids and gids they have in every
# container (Slurm and munge identify people by uid). A person already there with the same
# ids is used as is; one with other ids stops the apply before anything changes.
require CLUSTER USERS
mapfile -t specs < <(lines "$USERS")
users_check "${specs[@]}" || die "people of users[] clash with this host's (see above)"
host_people "$CLUSTER" "${specs[@]}"
