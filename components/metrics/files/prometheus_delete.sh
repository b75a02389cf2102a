# Prometheus goes with its container (and its data with it); stop it where the container stays.
require CONTAINER
created_in_this_clone "$CONTAINER" || exit 0
lxc_exists "$CONTAINER" && lxc_running "$CONTAINER" || exit 0
in_ct "$CONTAINER" systemctl disable --now --quiet prometheus || true
