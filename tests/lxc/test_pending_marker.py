"""Pending markers: many containers are made at once, each writes its marker, makes its
container and marks it; none of them may pull the directory from under another."""

import subprocess

from components.common.transport import helpers

# Eight creates at once, each making 40 containers (in a scratch LXC directory) the way
# container_create.sh does: pending marker, the container, the owner marker.
CREATES = r"""
root=$1
lxc_dir() { printf '%s/lxc/%s' "$root" "$1"; }
for worker in 1 2 3 4 5 6 7 8; do
  (
    for i in $(seq 40); do
      name="w$worker-c$i"
      lxc_pending_begin "$root/state" "$name"
      mkdir -p "$(lxc_dir "$name")"
      lxc_mark test "$root/state" "$name"
    done
  ) &
done
failed=0
for job in $(jobs -p); do wait "$job" || failed=1; done
[ "$failed" = 0 ] || die "a create failed"
ls "$root/state/pending" | wc -l
"""


def test_markers_are_written_while_other_containers_are_marked(tmp_path):
    done = subprocess.run(
        ["bash", "-c", helpers() + CREATES, "creates", str(tmp_path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0", "pending markers left behind"
    owners = sorted(tmp_path.glob("lxc/*/gpucluster-owner"))
    assert len(owners) == 320 and {owner.read_text() for owner in owners} == {"test\n"}
