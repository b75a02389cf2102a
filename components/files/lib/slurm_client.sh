# The cluster's Slurm commands on a host come from its node image: each is a wrapper in
# $CLUSTER_DIR/bin that runs the command in one of the cluster's containers on this host, which
# has the cluster's munge and a copy of slurm.conf. The host needs no Slurm or munge of its own,
# and the client always speaks the Slurm version of the cluster, whatever the host ships.

# The client commands a host's scripts, ./status.sh and operators call.
SLURM_CLIENT_PROGRAMS="sinfo squeue scontrol srun sbatch salloc scancel sacct sacctmgr sshare sprio sreport sstat sdiag"
# The slurm.conf the wrappers' commands read in their container (a node's own is configless).
CT_CLIENT_CONF=/etc/gpucluster/slurm.conf

# write_slurm_wrappers CONTAINER: the wrappers, each running its command in CONTAINER.
write_slurm_wrappers() {
  require CLUSTER CLUSTER_DIR
  local name=$1 program where=""
  # The host's LXC path, where it is not LXC's default (hosts[].lxc_dir).
  [ -z "${LXC_PATH:-}" ] || where="-P $LXC_PATH "
  for program in $SLURM_CLIENT_PROGRAMS; do
    printf '#!/bin/sh\n# Managed by the gpu-cluster Pulumi program: %s from the node image of the cluster %s, run in %s.\nexec lxc-attach %s-n %s --clear-env -v LC_ALL=C -v PATH=/usr/sbin:/usr/bin:/sbin:/bin -v SLURM_CONF=%s -- %s "$@"\n' \
      "$program" "$CLUSTER" "$name" "$where" "$name" "$CT_CLIENT_CONF" "$program" |
      write_if_changed "$CLUSTER_DIR/bin/$program" 0755 || true
  done
}

# use_cluster_slurm: this cluster's Slurm commands (the wrappers) first on PATH.
use_cluster_slurm() {
  require CLUSTER_DIR
  [ -x "$CLUSTER_DIR/bin/sinfo" ] || die "the cluster's Slurm client is missing on this host ($CLUSTER_DIR/bin, made by its slurm-client resource)"
  unset SLURM_CONF
  export PATH="$CLUSTER_DIR/bin:$PATH"
}

# stop_host_munged: the cluster's munged an earlier release ran on the host (known by its pid
# file in $CLUSTER_DIR/munge and that file named on its command line), stopped and its files removed.
stop_host_munged() {
  require CLUSTER_DIR
  local state="$CLUSTER_DIR/munge" pid
  pid=$(cat "$state/munged.pid" 2>/dev/null || true)
  if [[ "$pid" =~ ^[0-9]+$ ]] && tr '\0' '\n' < "/proc/$pid/cmdline" 2>/dev/null | grep -qxF -- "--pid-file=$state/munged.pid"; then
    log "stopping the cluster's munged on the host (the cluster's Slurm now runs from its image)"
    stop_daemon "$pid" munged
  fi
  rm -rf "$state"
  [ -z "${HOST_MUNGE_DIR-}" ] || rm -rf "$HOST_MUNGE_DIR"
}
