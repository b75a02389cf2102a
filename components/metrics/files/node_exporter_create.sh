# The node exporter (Debian's prometheus-node-exporter, in the node image, disabled there) in a
# node, on the node's NAT address only, with a few collectors.
require CONTAINER NODE_EXPORTER_ARGS NODE_EXPORTER_ADDRESS NODE_EXPORTER_PORT
report_clone "$CONTAINER"
if ! in_ct "$CONTAINER" test -x /usr/bin/prometheus-node-exporter; then
  log "$CONTAINER: its node image predates the node exporter: installing it"
  in_ct "$CONTAINER" env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
  in_ct "$CONTAINER" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends prometheus-node-exporter >&2
fi
changed=1
printf '# Managed by the gpu-cluster Pulumi program.\nARGS="%s"\n' "$NODE_EXPORTER_ARGS" |
  ct_write_if_changed "$CONTAINER" /etc/default/prometheus-node-exporter 0644 root:root && changed=0
if [ "$changed" = 0 ] || ! in_ct "$CONTAINER" systemctl is-active --quiet prometheus-node-exporter; then
  in_ct "$CONTAINER" systemctl enable --quiet prometheus-node-exporter
  in_ct "$CONTAINER" systemctl restart prometheus-node-exporter
fi
wait_until 30 "the node exporter of $CONTAINER on $NODE_EXPORTER_ADDRESS:$NODE_EXPORTER_PORT" \
  curl -fsS --max-time 2 -o /dev/null "http://$NODE_EXPORTER_ADDRESS:$NODE_EXPORTER_PORT/metrics"
