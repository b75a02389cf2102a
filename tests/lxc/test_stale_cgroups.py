"""A container start cut short (a crash, a killed run) leaves empty cgroups under the
container's fixed cgroup names; LXC does not reuse them and the container then never starts
("ABORTING"). The lxc-start wrapper (components/files/lib/lxc.sh) removes them first, and only
them: a cgroup with a process in it stays."""

import subprocess
import uuid
from pathlib import Path

import pytest

from components.common.transport import INTERPRETER, script

pytestmark = pytest.mark.privileged
CGROUPS = Path("/sys/fs/cgroup")


def hierarchies() -> list[Path]:
    """Where LXC makes a container's cgroups: each v1 hierarchy, or the v2 root."""
    if (CGROUPS / "cgroup.controllers").exists():
        return [CGROUPS]
    return [path for path in CGROUPS.iterdir() if path.is_dir() and (path / "cgroup.procs").exists()]


def clear(tmp_path: Path, name: str) -> None:
    caller = tmp_path / "clear.sh"
    caller.write_text('clear_stale_cgroups "$1"\n')
    done = subprocess.run([*INTERPRETER, script(caller), "clear.sh", name], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_a_stopped_container_s_empty_cgroups_go_and_a_busy_one_stays(tmp_path):
    name = f"stale-{uuid.uuid4().hex[:8]}"
    made = []
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        for root in hierarchies():
            for path in (root / f"lxc.monitor.{name}", root / f"lxc.payload.{name}" / "ns"):
                path.mkdir(parents=True)
                made.append(path)
        busy = hierarchies()[0] / f"lxc.payload.{name}" / "ns"
        (busy / "cgroup.procs").write_text(str(sleeper.pid))
        clear(tmp_path, name)
        left = sorted(str(p) for p in made if p.exists())
        assert left == [str(busy)], left
        assert (busy.parent).exists(), "the parent of a busy cgroup was removed"
    finally:
        sleeper.kill()
        sleeper.wait()
        for path in reversed(made):
            for directory in (path, path.parent):
                if directory.exists() and directory.name != "cgroup":
                    subprocess.run(["rmdir", str(directory)], capture_output=True)
