# shellcheck shell=bash
# Jobs in container images in slurm_check.sh's nodes (sourced there): Enroot and Pyxis as the
# node image's build made them for Debian 12's Slurm (prepare.py's containers/enroot.tar), with
# the stack's own Enroot settings, driver hook and prolog (c000's `-containers` command in
# commands.json), and the stack's plugstack.conf; then jobs through `srun --container-image`
# of prepare.py's probe.sqsh (probe_image.py: python3, an os-release of its own): the image's
# system, nvidia-smi -L with exactly the job's GPU, none without --gres, and the acceptance
# probe with its CUDA computation, inside the container. Uses slurm_check.sh's ETC, SW,
# SLURM_ROOT, CT, SHARED, NODES, slurmd_env, run_job, verdict and probe.
CW=tools/gpu_node_check/work/containers

# containers_install: before slurmd starts (plugstack.conf's Pyxis is `required`, and
# slurm.conf's Prolog runs before every job).
containers_install() {
  local n ct root file mode
  cp "$SW/plugstack.conf" "$ETC/plugstack.conf"
  # slurm.conf's PluginDir, on this host (srun) and in the nodes (slurmd, slurmstepd) alike.
  tar -xOf "$CW/enroot.tar" ./usr/lib/x86_64-linux-gnu/slurm-wlm/spank_pyxis.so \
    > "$SLURM_ROOT/usr/lib/x86_64-linux-gnu/slurm-wlm/spank_pyxis.so" || verdict FAIL "no Pyxis in $CW/enroot.tar"
  for n in "${NODES[@]}"; do
    ct=$(slurmd_env "$n" CONTAINER) || return 1
    root=$CT/$ct/root # the node's rootfs: what is written here lands in its own upper layer
    tar -C "$root" -xf "$CW/enroot.tar" --no-overwrite-dir --keep-directory-symlink ./etc/enroot ./usr/local ||
      verdict FAIL "Enroot did not unpack into $n"
    mkdir -p "$root/etc/enroot/mounts.d" "$root/etc/enroot/hooks.d" "$root/usr/local/sbin"
    for file in ENROOT_CONF:/etc/enroot/enroot.conf:0644 MOUNTS:/etc/enroot/mounts.d/50-gpucluster.fstab:0644 \
      DRIVER_HOOK:/etc/enroot/hooks.d/50-gpucluster-driver.sh:0755 PROLOG:/usr/local/sbin/gpucluster-prolog:0755; do
      IFS=: read -r var path mode <<< "$file"
      env_of dev-c000-slurm-containers "$var" > "$root$path" && chmod "$mode" "$root$path" ||
        verdict FAIL "$n: could not write $path"
    done
    # Enroot makes a container of a squashfs with unsquashfs: Debian 12's, where the host has none.
    if ! in_node "$ct" sh -c 'command -v unsquashfs' > /dev/null; then
      mkdir -p "$SCRATCH/squashfs"
      for deb in "$CW"/debs/*.deb; do dpkg -x "$deb" "$SCRATCH/squashfs"; done
      printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$SCRATCH/squashfs/lib/x86_64-linux-gnu" \
        "$SCRATCH/squashfs/usr/bin/unsquashfs" > "$root/usr/local/bin/unsquashfs"
      chmod 0755 "$root/usr/local/bin/unsquashfs"
    fi
    echo "$n: $(in_node "$ct" enroot version 2>&1), $(in_node "$ct" sh -c 'command -v unsquashfs')"
  done
}

# containers_jobs: once both nodes are idle.
containers_jobs() {
  local image=$SHARED/probe.sqsh out rc gpus
  step "jobs in container images (srun --container-image=$image)"
  cp "$CW/probe.sqsh" "$image" || { verdict FAIL "could not copy the probe's image to $image"; return; }
  out=$(run_job -w c000 --container-image="$image" cat /etc/os-release); rc=$?; echo "$out"
  if [ "$rc" = 0 ] && grep -q 'gpucluster GPU check image' <<< "$out"; then verdict ok "the job ran in the image (its os-release)"; else
    verdict FAIL "the job did not run in the image (exit $rc)"; fi
  out=$(run_job -w c000 --gres=gpu:1 --container-image="$image" nvidia-smi -L); rc=$?; echo "$out"
  gpus=$(grep -c '^GPU ' <<< "$out")
  if [ "$rc" = 0 ] && [ "$gpus" = 1 ]; then verdict ok "in the image, --gres=gpu:1: nvidia-smi -L lists 1 GPU"; else
    verdict FAIL "in the image, --gres=gpu:1: nvidia-smi -L lists $gpus GPUs (exit $rc), not 1"; fi
  out=$(run_job -w c000 --container-image="$image" nvidia-smi -L); rc=$?; echo "$out"
  gpus=$(grep -c '^GPU ' <<< "$out")
  if [ "$gpus" = 0 ]; then verdict ok "in the image, no --gres: nvidia-smi -L lists no GPU (exit $rc)"; else
    verdict FAIL "in the image, no --gres: nvidia-smi -L lists $gpus GPUs: the container let the GPU through"; fi
  out=$(run_job -w c000 --gres=gpu:1 --mem=3G --container-image="$image" python3 -c "$(probe)" \
    '{"gpus": ["/dev/nvidia0"], "others": [[195, 1]], "gres": 1}'); rc=$?; echo "$out"
  if [ "$rc" = 0 ] && grep -q '^ok CUDA' <<< "$out" && ! grep -q '^FAIL' <<< "$out"; then
    verdict ok "in the image: the acceptance probe and its CUDA computation"; else
    verdict FAIL "in the image: the acceptance probe (exit $rc)"; fi
  rm -f "$image"
}
