# Jobs in container images off a node (containers: removed or disabled): the files
# containers_create.sh wrote; Pyxis is no longer in plugstack.conf and the prolog no longer in
# slurm.conf. Each person's images on the node go with its Enroot directories. The old copy of
# a setup replaced with its node is deleted after the new one was made, in the new clone of the
# same name: that clone's files are the new setup's (created_in_this_clone).
require CONTAINER DATA_DIR RUNTIME_DIR
created_in_this_clone "$CONTAINER" || exit 0
lxc_exists "$CONTAINER" && in_ct "$CONTAINER" true 2>/dev/null || exit 0
in_ct "$CONTAINER" /bin/sh -c '
  rm -rf /etc/enroot/enroot.conf /etc/enroot/mounts.d/50-gpucluster.fstab \
    /etc/enroot/hooks.d/50-gpucluster-driver.sh /usr/local/sbin/gpucluster-prolog /etc/enroot/site \
    "$2" "$1"
  if ls /usr/local/share/ca-certificates/gpucluster-registry-*.crt >/dev/null 2>&1; then
    rm -f /usr/local/share/ca-certificates/gpucluster-registry-*.crt
    update-ca-certificates --fresh >/dev/null
  fi' sh "$DATA_DIR" "$RUNTIME_DIR"
