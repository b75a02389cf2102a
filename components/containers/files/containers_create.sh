# Jobs in container images on a node: Enroot's site config, the driver hook, the mounts every
# container gets, the registries' CAs and the site's account, and the prolog that makes each
# person's Enroot directories. Pyxis and Enroot themselves are in the node image
# (components/files/lib/containers_build.sh); slurm.conf names the prolog and plugstack.conf
# loads Pyxis (served by the controller). The site's registry password comes on stdin only.
require CONTAINER ENROOT_CONF PROLOG DRIVER_HOOK MOUNTS DATA_DIR IMAGE RUNTIME_PACKAGES
report_clone "$CONTAINER"
# A node of an image built without them (containers: added to a running cluster) gets them in
# place, its jobs running on.
ct_install_containers "$CONTAINER" "$IMAGE" "$RUNTIME_PACKAGES"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
printf '%s' "$ENROOT_CONF" | ct_stage "$stage" /etc/enroot/enroot.conf 0644 root:root
printf '%s' "$MOUNTS" | ct_stage "$stage" /etc/enroot/mounts.d/50-gpucluster.fstab 0644 root:root
printf '%s' "$DRIVER_HOOK" | ct_stage "$stage" /etc/enroot/hooks.d/50-gpucluster-driver.sh 0755 root:root
printf '%s' "$PROLOG" | ct_stage "$stage" /usr/local/sbin/gpucluster-prolog 0755 root:root
# The site's account for each registry that has one (netrc: Enroot reads it as the person).
credentials=$(cat)
if [ -n "$credentials" ]; then
  printf '%s\n' "$credentials" | ct_stage "$stage" /etc/enroot/site/.credentials 0644 root:root
else
  ct_stage_absent "$stage" /etc/enroot/site/.credentials
fi
# Each registry's CA among the node's trusted ones (curl's bundle, which Enroot uses), the
# stack's own registry's (containers.registry) too; the file of one no longer given goes.
for index in $(seq 0 15) stack; do
  var=REGISTRY_CA_${index^^}
  path=/usr/local/share/ca-certificates/gpucluster-registry-$index.crt
  if [ -n "${!var:-}" ]; then
    printf '%s' "${!var}" | ct_stage "$stage" "$path" 0644 root:root
  else
    ct_stage_absent "$stage" "$path"
  fi
done
changed=$(ct_install_staged "$CONTAINER" "$stage")
# Where each person's directories go (the prolog makes them): root's, open to pass through.
in_ct "$CONTAINER" sh -c 'mkdir -p "$1/cache" "$1/data" && chmod 0755 "$1" "$1/cache" "$1/data"' sh "$DATA_DIR"
if grep -q '^/usr/local/share/ca-certificates/' <<< "$changed"; then
  in_ct "$CONTAINER" update-ca-certificates --fresh >/dev/null
fi
[ -z "$changed" ] || log "node $CONTAINER: $(tr '\n' ' ' <<< "$changed")"
