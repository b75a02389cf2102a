#!/bin/bash
# What ended jobs left in a node's /dev/shm and /tmp (DIRS, default both): tmpfs pages stay
# charged to the node's memory after the job's cgroup is gone (a killed PyTorch DataLoader's
# torch_* files), and with no swap they take the room of later jobs and of the daemons. Run
# as root by a timer in every node (gpucluster-job-files.timer). A person's files (uids
# 1000-60000, as users[] allows) go once that person has no process left on the node: no job of
# theirs runs here. Only files older than the check, so a job starting meanwhile keeps its own.
# Never follows a link (find -P: a link is removed, never what it points to), never leaves the
# directory's filesystem (-xdev), never touches another uid's file (a directory of theirs
# holding someone else's file stays). Always exits 0.
set -u
dirs=("$@")
[ "${#dirs[@]}" -gt 0 ] || dirs=(/dev/shm /tmp)
stamp=$(mktemp /run/gpucluster-job-files.XXXXXX) || exit 0
trap 'rm -f "$stamp"' EXIT
# Files older than the stamp only: made before the uid was found without a process.
touch -d '-1 second' "$stamp"
for dir in "${dirs[@]}"; do
  [ -d "$dir" ] && [ ! -L "$dir" ] || continue
  while read -r uid; do
    [ "$uid" -ge 1000 ] && [ "$uid" -le 60000 ] || continue
    # Any process of the uid (a job's, or its step's) keeps its files.
    [ -z "$(ps -o pid= -u "$uid" 2>/dev/null)" ] || continue
    find -P "$dir" -xdev -mindepth 1 -uid "$uid" ! -newer "$stamp" -delete 2>/dev/null
    left=$(find -P "$dir" -xdev -mindepth 1 -uid "$uid" ! -newer "$stamp" -printf . 2>/dev/null | wc -c)
    [ "$left" = 0 ] || echo "uid $uid: $left of its entries stay in $dir (directories holding others' files)"
  done < <(find -P "$dir" -xdev -mindepth 1 -printf '%U\n' 2>/dev/null | sort -un)
done
exit 0
