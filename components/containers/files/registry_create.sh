# The stack's registry: a service container (docker-registry installed by LXC's Debian
# template; lib/service_container.sh) on the NAT bridge, its data directory bound in from the
# host. Two registries serve one store: at PORT anonymous and read-only (every node pulls
# there, no person can push), at PUSH_PORT the push account only (its htpasswd file, written by
# registry_account_create.sh; empty until then: no one). TLS by a CA made once here, whose key
# stays in the data directory (root's, on the host). Prints the CA's certificate (every node
# trusts it).
require CLUSTER CLUSTER_DIR CONTAINER NODE_HOSTNAME LXC_CONFIG NAT_ADDRESS RELEASE PACKAGES STORE \
  DATA_IN_CONTAINER PORT PUSH_PORT
exec 3>&1 1>&2
[ -d "$STORE" ] || die "the registry's store $STORE is missing (made by the registry's data resource)"
# Debian's own unit would serve its default config (every address, no TLS): never started.
without_default_registry() {
  rm -f "$1"/etc/systemd/system/multi-user.target.wants/docker-registry.service
}
service_container_up without_default_registry
in_ct "$CONTAINER" systemctl disable --now --quiet docker-registry 2>/dev/null || true
data=$DATA_IN_CONTAINER
# The CA (once: the nodes trust it), and the registry's certificate for its address and names,
# made again when they change or it nears its end (30 days). A kept store taken up by a new
# container: its images become this container's registry user's.
in_ct "$CONTAINER" sh -c '
  set -eu; data=$1; address=$2; name=$3; container=$4
  umask 077
  mkdir -p "$data/tls" "$data/images"
  cd "$data/tls"
  if [ ! -s ca.crt ] || [ ! -s ca.key ]; then
    openssl req -x509 -newkey rsa:3072 -nodes -days 3650 -subj "/CN=gpucluster registry CA ($container)" \
      -keyout ca.key -out ca.crt 2>/dev/null
    rm -f server.crt
  fi
  san="subjectAltName=IP:$address,DNS:$name,DNS:$container"
  if [ ! -s server.crt ] || [ "$(cat san 2>/dev/null)" != "$san" ] || ! openssl x509 -checkend 2592000 -noout -in server.crt >/dev/null; then
    openssl req -newkey rsa:3072 -nodes -subj "/CN=$address" -keyout server.key -out server.csr 2>/dev/null
    printf "%s\n" "$san" > san
    openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 825 -extfile san \
      -out server.crt 2>/dev/null
    rm -f server.csr
  fi
  chown root:docker-registry server.key server.crt ca.crt
  chmod 0640 server.key
  chmod 0644 server.crt ca.crt
  chmod 0750 "$data/tls"
  chgrp docker-registry "$data/tls" "$data"
  chmod 0750 "$data"
  [ "$(stat -c %U "$data/images")" = docker-registry ] || chown -R docker-registry:docker-registry "$data/images"
' sh "$data" "$NAT_ADDRESS" "$NODE_HOSTNAME" "$CONTAINER"
# No account until the account's command writes it (docker-registry would make one of its own
# for a missing file, with a password in its log).
in_ct "$CONTAINER" sh -c '[ -e "$1" ] || { touch "$1"; chmod 0640 "$1"; chgrp docker-registry "$1"; }' sh "$data/htpasswd"
tls="tls: {certificate: $data/tls/server.crt, key: $data/tls/server.key}"
changed=0
printf '%s\n' "# Managed by the gpu-cluster Pulumi program: every pull, read-only, anonymous." \
  "version: 0.1" "log: {level: info, fields: {service: pull}}" \
  "storage: {filesystem: {rootdirectory: $data/images}, maintenance: {readonly: {enabled: true}, uploadpurging: {enabled: false}}}" \
  "http: {addr: '$NAT_ADDRESS:$PORT', $tls}" |
  ct_write_if_changed "$CONTAINER" /etc/docker/registry/pull.yml 0644 root:root && changed=1
printf '%s\n' "# Managed by the gpu-cluster Pulumi program: pushes, the push account only." \
  "version: 0.1" "log: {level: info, fields: {service: push}}" \
  "storage: {filesystem: {rootdirectory: $data/images}, delete: {enabled: true}}" \
  "http: {addr: '$NAT_ADDRESS:$PUSH_PORT', $tls}" \
  "auth: {htpasswd: {realm: gpucluster-registry, path: $data/htpasswd}}" |
  ct_write_if_changed "$CONTAINER" /etc/docker/registry/push.yml 0644 root:root && changed=1
for role in pull push; do
  printf '%s\n' "# Managed by the gpu-cluster Pulumi program." "[Unit]" \
    "Description=gpu-cluster registry ($role)" "After=network-online.target" "" "[Service]" \
    "User=docker-registry" "ExecStart=/usr/bin/docker-registry serve /etc/docker/registry/$role.yml" \
    "Restart=on-failure" "NoNewPrivileges=yes" "" "[Install]" "WantedBy=multi-user.target" |
    ct_write_if_changed "$CONTAINER" "/etc/systemd/system/gpucluster-registry-$role.service" 0644 root:root && changed=1
done
[ "$changed" = 0 ] || in_ct "$CONTAINER" systemctl daemon-reload
for role in pull push; do
  unit=gpucluster-registry-$role
  in_ct "$CONTAINER" systemctl enable --quiet "$unit"
  if [ "$changed" = 1 ] || ! in_ct "$CONTAINER" systemctl is-active --quiet "$unit"; then
    in_ct "$CONTAINER" systemctl restart "$unit"
  fi
done
ca=$(in_ct "$CONTAINER" cat "$data/tls/ca.crt")
answers() { [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 3 --cacert <(printf '%s\n' "$ca") "https://$NAT_ADDRESS:$1/v2/")" = "$2" ]; }
if ! (wait_until 60 "the registry at $NAT_ADDRESS:$PORT" answers "$PORT" 200) ||
  ! (wait_until 30 "the registry's pushes at $NAT_ADDRESS:$PUSH_PORT" answers "$PUSH_PORT" 401); then
  in_ct "$CONTAINER" journalctl -u gpucluster-registry-pull -u gpucluster-registry-push -n 30 --no-pager >&2 || true
  die "the registry in $CONTAINER does not answer at $NAT_ADDRESS:$PORT (pulls) and :$PUSH_PORT (pushes)"
fi
printf '%s\n' "$ca" >&3
