require CONTAINER
created_in_this_clone "$CONTAINER" || exit 0
lxc_exists "$CONTAINER" && lxc_running "$CONTAINER" || exit 0
in_ct "$CONTAINER" systemctl disable --now --quiet gpu-web-app || true
in_ct "$CONTAINER" rm -rf /opt/gpu-web-app /etc/gpu-web-app /etc/systemd/system/gpu-web-app.service
