require CONTAINER
lxc_exists "$CONTAINER" && lxc_running "$CONTAINER" || exit 0
in_ct "$CONTAINER" systemctl disable --now --quiet slurmd || true
in_ct "$CONTAINER" rm -f /etc/default/slurmd
