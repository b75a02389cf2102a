# Remove the people this program made in the container; nothing to do once it is gone.
require CONTAINER USERS_RECORD
created_in_this_clone "$CONTAINER" || exit 0
lxc_exists "$CONTAINER" && lxc_running "$CONTAINER" || exit 0
users_in_ct "$CONTAINER" "$USERS_RECORD"
