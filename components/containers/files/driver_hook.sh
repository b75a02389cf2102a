#!/bin/bash
# Enroot hook (hooks.d) of gpu-cluster: the host driver's files the node has, bound read-only
# into the job's container at the same paths, and the container's loader cache rebuilt, so a
# CUDA program in any image finds libcuda and nvidia-smi. NVIDIA's own hook needs
# libnvidia-container, which the nodes do not have. The GPUs themselves need no hook: Enroot
# binds the node's /dev, and the container's processes stay in the job's devices cgroup, which
# opens the job's GPUs and refuses every other one, as it does outside the container.
# The driver's files are those the program bound into the node from the host (mount points in
# the node's library directory and /usr/bin; lib/gpu_driver.sh): nothing a person can write.
set -euo pipefail
: "${ENROOT_ROOTFS:?}"
mounts=()
while read -r _ _ _ _ target _; do
  case "$target" in
  /usr/lib/*-linux-gnu/lib*.so* | /usr/bin/nvidia-*) [ -f "$target" ] && mounts+=("$target") ;;
  esac
done < /proc/self/mountinfo
[ "${#mounts[@]}" -gt 0 ] || exit 0
for path in "${mounts[@]}"; do
  printf '%s %s none x-create=file,bind,ro,nosuid,nodev,private\n' "$path" "$path"
done | enroot-mount --root "$ENROOT_ROOTFS" -
ldconfig -r "$ENROOT_ROOTFS" 2>/dev/null || true
