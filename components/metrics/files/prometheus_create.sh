# Prometheus (Debian's package) in its own container: installed on first create (apt reaches
# Debian's mirror through the NAT bridge), then its scrape config, alert rules, listen address
# and retention; restarted when they change. Waits until it says it is ready.
require CONTAINER PROMETHEUS_CONFIG ALERT_RULES RULES_PATH PROMETHEUS_ARGS PROMETHEUS_URL
report_clone "$CONTAINER"
if ! in_ct "$CONTAINER" test -x /usr/bin/prometheus; then
  # Installed stopped: it would listen on every address with Debian's config until ours is written.
  in_ct "$CONTAINER" /bin/sh -c 'printf "#!/bin/sh\nexit 101\n" > /usr/sbin/policy-rc.d; chmod 0755 /usr/sbin/policy-rc.d'
  in_ct "$CONTAINER" env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
  in_ct "$CONTAINER" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >&2
  in_ct "$CONTAINER" rm -f /usr/sbin/policy-rc.d
fi
changed=1
printf '%s' "$PROMETHEUS_CONFIG" | ct_write_if_changed "$CONTAINER" /etc/prometheus/prometheus.yml 0644 root:root && changed=0
printf '%s' "$ALERT_RULES" | ct_write_if_changed "$CONTAINER" "$RULES_PATH" 0644 root:root && changed=0
printf '# Managed by the gpu-cluster Pulumi program.\nARGS="%s"\n' "$PROMETHEUS_ARGS" |
  ct_write_if_changed "$CONTAINER" /etc/default/prometheus 0644 root:root && changed=0
in_ct "$CONTAINER" promtool check config /etc/prometheus/prometheus.yml >&2 ||
  die "promtool refuses the rendered Prometheus config (above)"
if [ "$changed" = 0 ] || ! in_ct "$CONTAINER" systemctl is-active --quiet prometheus; then
  in_ct "$CONTAINER" systemctl enable --quiet prometheus
  in_ct "$CONTAINER" systemctl restart prometheus
fi
if ! (wait_until 60 "Prometheus at $PROMETHEUS_URL" curl -fsS --max-time 2 -o /dev/null "$PROMETHEUS_URL/-/ready"); then
  in_ct "$CONTAINER" journalctl -u prometheus -n 20 --no-pager >&2 || true
  die "Prometheus in $CONTAINER does not answer at $PROMETHEUS_URL"
fi
