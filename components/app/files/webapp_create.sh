# The GPU web app as a systemd unit in its container; waits until /healthz answers.
require CONTAINER APP_SOURCE APP_HANDLERS_SOURCE APP_PAGE_SOURCE APP_SETTINGS APP_PORT APP_ADDRESS
report_clone "$CONTAINER"
# The app's container faces the network: no munge, no Slurm client or daemons in it (it is
# cloned from the node image, which has them). The cluster panel reads a snapshot file instead.
in_ct "$CONTAINER" env DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq \
  slurmctld slurmd slurm-client slurm-wlm-basic-plugins munge libmunge2 >&2
in_ct "$CONTAINER" rm -rf /etc/munge /etc/slurm /var/lib/munge /var/log/munge
changed=1
printf '%s' "$APP_SOURCE" | ct_write_if_changed "$CONTAINER" /opt/gpu-web-app/app.py 0644 root:root && changed=0
# The app's handlers and page, beside it: app.py imports them from its own directory.
printf '%s' "$APP_HANDLERS_SOURCE" | ct_write_if_changed "$CONTAINER" /opt/gpu-web-app/web_handlers.py 0644 root:root && changed=0
printf '%s' "$APP_PAGE_SOURCE" | ct_write_if_changed "$CONTAINER" /opt/gpu-web-app/web_page.py 0644 root:root && changed=0
printf '%s\n' "$APP_SETTINGS" | ct_write_if_changed "$CONTAINER" /etc/gpu-web-app/config.json 0644 root:root && changed=0
ct_write_if_changed "$CONTAINER" /etc/systemd/system/gpu-web-app.service 0644 root:root <<'UNIT' && changed=0
[Unit]
Description=GPU web app (gpu-cluster)
After=network-online.target
Wants=network-online.target

[Service]
ExecStart=/usr/bin/python3 /opt/gpu-web-app/app.py /etc/gpu-web-app/config.json
DynamicUser=yes
SupplementaryGroups=video
NoNewPrivileges=yes
ProtectHome=yes
PrivateTmp=yes
Restart=on-failure
RestartSec=1
# Jobs run in process groups of their own; on stop, kill them all.
KillMode=control-group

[Install]
WantedBy=multi-user.target
UNIT
if [ "$changed" = 0 ] || ! in_ct "$CONTAINER" systemctl is-active --quiet gpu-web-app; then
  in_ct "$CONTAINER" systemctl daemon-reload
  in_ct "$CONTAINER" systemctl enable --quiet --no-reload gpu-web-app
  in_ct "$CONTAINER" systemctl restart gpu-web-app
fi
if ! (wait_until 30 "the web app's /healthz" curl -fsS --max-time 2 "http://$APP_ADDRESS:$APP_PORT/healthz"); then
  in_ct "$CONTAINER" systemctl status --no-pager gpu-web-app >&2 || true
  in_ct "$CONTAINER" ip -4 -o addr >&2 || true
  ip neigh show "$APP_ADDRESS" >&2 || true
  die "the web app in $CONTAINER does not answer on $APP_ADDRESS:$APP_PORT"
fi
