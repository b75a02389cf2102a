#!/bin/bash
# Slurm Prolog of gpu-cluster (root, on each node of a job, before its first step): the job's
# person gets their own Enroot directories, made by root where only root can write, so nothing
# another person made can stand in for them (Enroot itself would `mkdir -p` whatever it finds);
# then their cached image layers past the limit go, removed as that person: root never acts on
# a path a person can write. A failure here would drain the node: it logs and carries on.
# Set by the program: DATA_DIR, RUNTIME_DIR, CACHE_LIMIT_MB (components/containers/node_files.py).
set -uo pipefail
uid=${SLURM_JOB_UID:-}
[[ $uid =~ ^[0-9]+$ ]] && [ "$uid" != 0 ] || exit 0
gid=${SLURM_JOB_GID:-$(getent passwd "$uid" | cut -d: -f4)}
[[ $gid =~ ^[0-9]+$ ]] || { logger -t gpucluster-prolog "uid $uid has no group"; exit 0; }
made_for_person() {
  local dir=$1
  if [ ! -e "$dir" ] && [ ! -L "$dir" ]; then
    mkdir -m 0700 "$dir" && chown -h "$uid:$gid" "$dir"
  fi
  # Made here by root, under root's own directory: anything else is not the person's.
  [ -d "$dir" ] && [ ! -L "$dir" ] && [ "$(stat -c %u "$dir")" = "$uid" ] ||
    logger -t gpucluster-prolog "$dir is not uid $uid's own directory: left alone"
}
# The parents are root's and open to pass through: Enroot run as root (Pyxis' epilog) makes its
# own with mode 0700 when they are missing, which would shut every person out.
for parent in "$DATA_DIR/cache" "$DATA_DIR/data" "$RUNTIME_DIR"; do
  mkdir -p "$parent" && chmod 0755 "$DATA_DIR" "$parent"
  made_for_person "$parent/user-$uid"
done
# The least recently used layers past the limit, by the person (their own files only).
setpriv --reuid="$uid" --regid="$gid" --clear-groups --reset-env -- /bin/sh -c '
  cd "$1" 2>/dev/null || exit 0
  find . -maxdepth 1 -type f -printf "%A@ %s %f\n" | sort -rn |
    awk -v limit="$(($2 * 1048576))" "{ total += \$2; if (total > limit) print \$3 }" |
    while read -r file; do rm -f -- "./$file"; done
' sh "$DATA_DIR/cache/user-$uid" "$CACHE_LIMIT_MB" || logger -t gpucluster-prolog "pruning uid $uid's cache failed"
exit 0
