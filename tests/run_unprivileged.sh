#!/usr/bin/env bash
# The hosted CI selection, run the way a job container without privileges would: as `nobody`,
# with no capabilities, in network and mount namespaces of its own (no network but loopback),
# on a clone of HEAD that nobody can read. Needs root to set that up; changes nothing outside
# its namespaces and a temporary directory, which it removes.
#   tests/run_unprivileged.sh [pytest arguments]   (default: -m "not e2e and not privileged" tests)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[ "$(id -u)" = 0 ] || { echo "error: run as root: it drops to nobody itself" >&2; exit 1; }
[ $# -gt 0 ] || set -- -m "not e2e and not privileged" tests
work=$(mktemp -d /tmp/unprivileged.XXXXXX)
trap 'rm -rf "$work"' EXIT
git clone -q "$root" "$work/tree"
ln -s "$(readlink -f "$root/venv")" "$work/tree/venv"
mkdir "$work/home"
printf '[safe]\n\tdirectory = *\n' > "$work/home/.gitconfig"
chmod -R a+rX "$work" && chown -R nobody "$work/home"
# A python under /root (pyenv) is unreadable to nobody: in the private mount namespace /root is
# replaced by an empty directory holding only the python's own top directory.
python=$(readlink -f "$root/venv/bin/python")
top=$(printf '%s\n' "$python" | cut -d/ -f1-3)
unshare --mount --net --fork bash -c '
  set -e
  work=$1 python=$2 top=$3; shift 3
  mount --make-rprivate /
  ip link set lo up
  if [ "${python#/root/}" != "$python" ]; then
    mkdir "$work/top" && mount --bind "$top" "$work/top"
    mount -t tmpfs -o mode=0755 tmpfs /root
    mkdir "$top" && mount --bind "$work/top" "$top"
  fi
  cd "$work/tree"
  exec setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all --bounding-set=-all --no-new-privs \
    env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME="$work/home" LC_ALL=C.UTF-8 \
    venv/bin/python -m pytest -p no:cacheprovider "$@"
' bash "$work" "$python" "$top" "$@"
