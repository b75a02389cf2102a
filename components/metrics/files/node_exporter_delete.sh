# Stop the node's exporter (it stays installed in the image); nothing to do when the node is gone.
require CONTAINER
created_in_this_clone "$CONTAINER" || exit 0
lxc_exists "$CONTAINER" && lxc_running "$CONTAINER" || exit 0
in_ct "$CONTAINER" systemctl disable --now --quiet prometheus-node-exporter || true
in_ct "$CONTAINER" rm -f /etc/default/prometheus-node-exporter
