# The GPU web app as a systemd unit in its container; waits until /healthz answers.
require CONTAINER APP_SOURCE APP_PORT APP_ADDRESS JOB_COMMAND MAX_CONCURRENT_JOBS JOB_TIMEOUT_S
changed=1
printf '%s' "$APP_SOURCE" | ct_write_if_changed "$CONTAINER" /opt/gpu-web-app/app.py 0644 root:root && changed=0
# Settings as JSON, built by a JSON encoder, not by joining strings.
python3 -c 'import json, sys; print(json.dumps({"port": int(sys.argv[1]), "job_command": sys.argv[2].split("\n"),
  "max_concurrent_jobs": int(sys.argv[3]), "job_timeout_s": float(sys.argv[4])}, indent=1))' \
  "$APP_PORT" "$(lines "$JOB_COMMAND")" "$MAX_CONCURRENT_JOBS" "$JOB_TIMEOUT_S" |
  ct_write_if_changed "$CONTAINER" /etc/gpu-web-app/config.json 0644 root:root && changed=0
ct_write_if_changed "$CONTAINER" /etc/systemd/system/gpu-web-app.service 0644 root:root <<'UNIT' && changed=0
[Unit]
Description=GPU web app (gpu-cluster)
After=network.target

[Service]
ExecStart=/usr/bin/python3 /opt/gpu-web-app/app.py /etc/gpu-web-app/config.json
DynamicUser=yes
SupplementaryGroups=video
Restart=on-failure

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
