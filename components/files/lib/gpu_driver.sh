# The NVIDIA driver's user-space files on this host, found where the host's own loader finds
# them, and where each goes in a node: libraries into the node's library directory (the
# directory its loader searches, whatever the host's layout: Debian's multiarch directory,
# /usr/local/nvidia/lib64, ...), programs into /usr/bin (on slurmd's and users' PATH).
#
# How they are found (the first that applies):
#   1. gpu.driver_files (DRIVER_FILES, glob patterns): exactly what matches, an override;
#   2. NVIDIA's container toolkit, when installed: `nvidia-container-cli list` (what the
#      container runtimes bind);
#   3. the host's loader cache: `ldconfig -p` for the driver's libraries (libcuda.so.1 first),
#      each resolved to a real file, and nvidia-smi's real program (never a wrapper script).

# The driver's libraries a compute node uses (stems of their sonames): CUDA, NVML, the JIT
# compilers and what they load, OpenCL, the allocator, the config library.
GPU_DRIVER_LIBRARIES="libcuda libnvidia-ml libnvidia-ptxjitcompiler libnvidia-nvvm libnvidia-gpucomp libcudadebugger libnvidia-opencl libnvidia-allocator libnvidia-cfg"
# The driver's programs a node gets (nvidia-smi is the one the health check needs).
GPU_DRIVER_PROGRAMS="nvidia-smi nvidia-debugdump nvidia-cuda-mps-control nvidia-cuda-mps-server"
# Where else nvidia-smi is looked for when it is not on PATH (GPU container hosts keep it in
# /usr/local/nvidia/bin).
GPU_DRIVER_PROGRAM_DIRS="/usr/local/nvidia/bin /usr/bin /usr/local/bin /usr/sbin /opt/nvidia/bin"

# gpu_node_libdir [ARCH]: the library directory of a node (Debian multiarch, the node image's
# arch; ARCH: `uname -m`'s, when the caller has it already).
gpu_node_libdir() {
  case "${1:-$(uname -m)}" in
    x86_64) echo /usr/lib/x86_64-linux-gnu ;;
    aarch64) echo /usr/lib/aarch64-linux-gnu ;;
    ppc64le) echo /usr/lib/powerpc64le-linux-gnu ;;
    *) echo /usr/lib ;;
  esac
}

# gpu_ldconfig_flag [ARCH]: the `ldconfig -p` flag of this host's native libraries (32-bit ones are skipped).
gpu_ldconfig_flag() {
  case "${1:-$(uname -m)}" in
    x86_64) echo x86-64 ;;
    aarch64) echo AArch64 ;;
    *) echo "" ;;
  esac
}

# gpu_is_elf FILE: FILE is an ELF binary (a program or library, not a script).
gpu_is_elf() { [ -f "$1" ] && [ "$(head -c 4 "$1" 2>/dev/null | od -An -c | tr -d ' \n')" = 177ELF ]; }

# gpu_safe_name PATH WHERE: a host file name becomes part of a config line: only names of safe
# characters, so a newline or a space in a name can never add or change a line.
gpu_safe_name() {
  [[ $1 =~ ^[A-Za-z0-9._/+@-]+$ ]] ||
    die "driver file $(printf '%q' "$1") ($2) has characters an LXC config line cannot hold; rename it or narrow the pattern"
}

# gpu_ldconfig_libraries [ARCH]: `SONAME PATH` of the driver's libraries in the host's loader
# cache, the loader's choice first (ldconfig -p lists in its search order), one per soname.
gpu_ldconfig_libraries() {
  local flag stems
  command -v ldconfig >/dev/null || return 0
  flag=$(gpu_ldconfig_flag "${1-}")
  stems=${GPU_DRIVER_LIBRARIES// /|}
  stems=${stems//./\\.}
  # The flags may hold spaces ("libc6,x86-64, OS ABI: Linux 3.2.0"): fields split at '|'.
  { ldconfig -p 2>/dev/null || true; } | sed -nE "s/^[[:space:]]*(($stems)\.so\.[0-9][0-9.]*) \(([^)]*)\) => (.+)$/\1|\3|\4/p" |
    while IFS='|' read -r soname flags path; do
      [ -z "$flag" ] || [[ $flags == *"$flag"* ]] || continue
      printf '%s %s\n' "$soname" "$path"
    done | awk '!seen[$1]++ { print $1, $2 }'
}

# gpu_real_program NAME [DIR...]: the real (ELF) program NAME: on PATH or in DIRs; a wrapper
# script is followed to the program it names.
gpu_real_program() {
  local name=$1 candidate real target
  shift
  local candidates=()
  candidate=$(command -v "$name" 2>/dev/null || true)
  [ -z "$candidate" ] || candidates+=("$candidate")
  for candidate in "$@"; do candidates+=("$candidate/$name"); done
  for candidate in "${candidates[@]}"; do
    [ -e "$candidate" ] || continue
    real=$(realpath -e "$candidate" 2>/dev/null) || continue
    if gpu_is_elf "$real"; then
      printf '%s\n' "$real"
      return 0
    fi
    # A wrapper (a script): the absolute paths of NAME it names.
    while read -r target; do
      target=$(realpath -e "$target" 2>/dev/null) || continue
      if [ "$target" != "$real" ] && gpu_is_elf "$target"; then
        printf '%s\n' "$target"
        return 0
      fi
    done < <(grep -aoE "/[A-Za-z0-9._/+@-]*/$name\b" "$real" 2>/dev/null || true)
  done
  return 1
}

# gpu_driver_method: how this host's driver files are found (see above).
gpu_driver_method() {
  if [ -n "$(lines "${DRIVER_FILES-}")" ]; then
    echo "gpu.driver_files"
  elif command -v nvidia-container-cli >/dev/null && nvidia-container-cli list --libraries >/dev/null 2>&1; then
    echo "nvidia-container-cli list"
  else
    echo "ldconfig -p"
  fi
}

# gpu_driver_mounts: `HOST_FILE NODE_PATH` of every driver file to bind into a node (read-only).
# A library is bound under its soname (the name the loader looks for) into the node's library
# directory; a program into /usr/bin; anything else (gpu.driver_files only) at its host path.
gpu_driver_mounts() { _gpu_driver_mounts_all | awk '!seen[$2]++'; }
_gpu_driver_mounts_all() {
  local arch libdir method file real soname pattern name libraries=""
  # Each found once: every node's create runs this, and each program started costs CPU there.
  arch=$(uname -m)
  libdir=$(gpu_node_libdir "$arch")
  method=$(gpu_driver_method)
  [ "$method" = gpu.driver_files ] || libraries=$(gpu_ldconfig_libraries "$arch")
  declare -A sonames=()
  while read -r soname file; do
    [ -n "$soname" ] || continue
    real=$(realpath -e "$file" 2>/dev/null) || continue
    sonames[$real]=$soname
  done <<< "$libraries"
  case "$method" in
    gpu.driver_files)
      shopt -s nullglob
      while read -r pattern; do
        for file in $pattern; do
          gpu_safe_name "$file" "gpu.driver_files: $pattern"
          # Only files (a symlink to one included), never directories.
          [ -f "$file" ] || continue
          name=${file##*/}
          case "$file" in
            */lib*.so | */lib*.so.*) printf '%s %s/%s\n' "$file" "$libdir" "$name" ;;
            */bin/* | */sbin/*) printf '%s /usr/bin/%s\n' "$file" "$name" ;;
            *) printf '%s %s\n' "$file" "$file" ;;
          esac
        done
      done < <(lines "$DRIVER_FILES")
      shopt -u nullglob
      ;;
    "nvidia-container-cli list")
      while read -r file; do
        [ -n "$file" ] || continue
        gpu_safe_name "$file" "nvidia-container-cli list"
        real=$(realpath -e "$file" 2>/dev/null) || continue
        [ -f "$real" ] || continue
        # Under its soname where the loader cache knows it (the node's ldconfig names the rest).
        printf '%s %s/%s\n' "$real" "$libdir" "${sonames[$real]:-${file##*/}}"
      done < <(nvidia-container-cli list --libraries 2>/dev/null)
      while read -r file; do
        [ -n "$file" ] || continue
        gpu_safe_name "$file" "nvidia-container-cli list"
        real=$(realpath -e "$file" 2>/dev/null) || continue
        gpu_is_elf "$real" || continue
        printf '%s /usr/bin/%s\n' "$real" "${file##*/}"
      done < <(nvidia-container-cli list --binaries 2>/dev/null)
      ;;
    *)
      while read -r soname file; do
        [ -n "$soname" ] || continue
        gpu_safe_name "$file" "ldconfig -p: $soname"
        real=$(realpath -e "$file" 2>/dev/null) || continue
        gpu_is_elf "$real" || continue
        gpu_safe_name "$real" "ldconfig -p: $soname"
        printf '%s %s/%s\n' "$real" "$libdir" "$soname"
      done <<< "$libraries"
      # Programs: beside the libraries' directories first (…/lib64 -> …/bin), then PATH and the usual places.
      local dirs=() dir
      declare -A seen_dirs=()
      while read -r soname file; do
        [ -n "$file" ] || continue
        dir=${file%/*}
        [[ $file == */* ]] || dir=.
        dir=${dir:-/}
        [ -z "${seen_dirs[$dir]+x}" ] || continue
        seen_dirs[$dir]=1
        dirs+=("${dir%/*}/bin")
      done <<< "$libraries"
      for name in $GPU_DRIVER_PROGRAMS; do
        # shellcheck disable=SC2086
        file=$(gpu_real_program "$name" "${dirs[@]}" $GPU_DRIVER_PROGRAM_DIRS) || continue
        gpu_safe_name "$file" "$name"
        printf '%s /usr/bin/%s\n' "$file" "$name"
      done
      ;;
  esac
}

# gpu_driver_libcuda MOUNTS: the host file bound as libcuda.so.1 (or any libcuda.so*) among
# gpu_driver_mounts' lines; nothing when the driver's CUDA library was not found.
gpu_driver_libcuda() { awk '$2 ~ /\/libcuda\.so(\.[0-9.]+)?$/ { print $1; exit }' <<< "$1"; }
