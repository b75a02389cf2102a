"""The preflight's cgroup check (components/files/lib/cgroups.sh) on cgroup fixtures: can LXC
delegate the controllers the nodes need from its base cgroup (PID 1's)? On the H100 host of
the 2026-11-25 review, PID 1 sat in a non-root cgroup holding processes: LXC could enable no
controller, and every node with a cpuset failed to start."""

import subprocess
from pathlib import Path

from components.common.transport import INTERPRETER, helpers

ALL_V2 = "cpuset cpu io memory hugetlb pids rdma misc"


def check(function: str, *args: str) -> list[str]:
    text = helpers(["core.sh", "cgroups.sh"]) + f'{function} "$@"\n'
    done = subprocess.run([*INTERPRETER, text, "check", *args], capture_output=True, text=True, check=False, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def v2_fixture(
    tmp_path: Path, base: str, controllers: str = ALL_V2, enabled: str = "", procs: str = ""
) -> tuple[str, str]:
    """A cgroup2 tree with PID 1 in `base`: (the tree, PID 1's cgroup file)."""
    root = tmp_path / "cgroup"
    directory = root / base.strip("/")
    directory.mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text(ALL_V2 + "\n")
    (directory / "cgroup.controllers").write_text(controllers + "\n")
    (directory / "cgroup.subtree_control").write_text(enabled + "\n")
    (directory / "cgroup.procs").write_text(procs)
    pid1 = tmp_path / "pid1-cgroup"
    pid1.write_text(f"0::{base}\n")
    return str(root), str(pid1)


def test_a_systemd_host_qualifies(tmp_path):
    # systemd's PID 1 is in the root cgroup, which may enable controllers with processes in it.
    assert check("cgroup_v2_problems", *v2_fixture(tmp_path, "/", procs="1\n")) == []


def test_a_non_root_base_holding_processes_is_refused(tmp_path):
    problems = check("cgroup_v2_problems", *v2_fixture(tmp_path, "/container/init", procs="1\n57\n"))
    assert len(problems) == 3
    assert problems[0].startswith(
        "cgroup v2: LXC's base cgroup /container/init (PID 1's) holds processes, so it cannot enable the "
        "cpuset controller for the nodes"
    )
    assert "'Device or resource busy'" in problems[0] and "nodes[].cpus" in problems[0]
    assert [p.split(" controller ")[0].rsplit(" ", 1)[1] for p in problems] == ["cpuset", "memory", "pids"]


def test_a_non_root_base_with_the_controllers_already_delegated_qualifies(tmp_path):
    fixture = v2_fixture(tmp_path, "/lxc.base", enabled="cpuset memory pids")
    assert check("cgroup_v2_problems", *fixture) == []
    # Empty (its processes moved to a child): LXC can enable them itself.
    assert check("cgroup_v2_problems", *v2_fixture(tmp_path / "b", "/lxc.base")) == []


def test_a_controller_missing_from_the_base_is_named(tmp_path):
    problems = check("cgroup_v2_problems", *v2_fixture(tmp_path, "/", controllers="cpu io memory pids"))
    assert problems == [
        "cgroup v2: the cpuset controller is not available in LXC's base cgroup / (PID 1's; its "
        "cgroup.controllers has: cpu io memory pids): the nodes need it (cpuset for nodes[].cpus, memory "
        "and pids for Slurm's job containment); enable it in the parent cgroups' cgroup.subtree_control"
    ]


def test_cgroup_v1_needs_the_hierarchies(tmp_path):
    mounts = tmp_path / "mounts"
    full = [
        "tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0",
        "cgroup /sys/fs/cgroup/cpuset cgroup rw,relatime,cpuset,clone_children 0 0",
        "cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0",
        "cgroup /sys/fs/cgroup/devices cgroup rw,relatime,devices 0 0",
        "cgroup /sys/fs/cgroup/pids cgroup rw,relatime,pids 0 0",
    ]
    mounts.write_text("\n".join(full) + "\n")
    assert check("cgroup_v1_problems", str(mounts)) == []
    mounts.write_text("\n".join(line for line in full if "devices" not in line) + "\n")
    assert check("cgroup_v1_problems", str(mounts)) == [
        f"cgroup v1: no devices hierarchy is mounted ({mounts} has no cgroup mount with devices): LXC needs "
        "it for the nodes (cpuset for nodes[].cpus, devices for the GPU allow lines, memory and pids for "
        "Slurm's job containment); mount it under /sys/fs/cgroup/devices"
    ]


def test_this_hosts_own_cgroups_qualify():
    """The CI hosts run the e2e clusters: whatever their cgroup version, they pass."""
    if Path("/sys/fs/cgroup/cgroup.controllers").exists():
        assert check("cgroup_v2_problems", "/sys/fs/cgroup", "/proc/1/cgroup") == []
    else:
        assert check("cgroup_v1_problems", "/proc/self/mounts") == []
