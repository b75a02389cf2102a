"""The container script's handling of host file names matched by gpu.driver_files: a name
that an LXC config line cannot hold stops the script before anything changes; the cpuset
it writes from this host's online CPUs; and the programs it starts on the host (its CPU cost
per node)."""

import collections
import contextlib
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from components.common.transport import INTERPRETER, script
from components.lxc.cuda_container import FILES

CREATE = script(FILES / "container_create.sh")


@pytest.fixture(autouse=True)
def no_monitor_cgroups_left():
    """A failed lxc-start leaves its monitor's cgroups (lxc.monitor.cst-c000-N) in every
    hierarchy: remove the ones of this test's container, so no host comparison sees them."""
    yield
    # The failed start's monitor may take a moment to leave its cgroup; one still holding a
    # process after that stays: left for the kernel, never forced.
    deadline = time.monotonic() + 10
    while (left := list(Path("/sys/fs/cgroup").glob("*/lxc.*.cst-c000*"))) and time.monotonic() < deadline:
        for path in left:
            with contextlib.suppress(OSError):
                path.rmdir()
        time.sleep(0.2)


def run_create(tmp_path: Path, pattern: str = "", **changes: str) -> subprocess.CompletedProcess:
    environment = {
        "CLUSTER": "cst",
        "CLUSTER_DIR": str(tmp_path / "state"),
        "DEVICES": "",
        "IMAGE": "cst-image-absent",
        "CONTAINER": "cst-c000-absent",
        "NODE_HOSTNAME": "c000",
        "LXC_CONFIG": "",
        "NAT_ADDRESS": "10.98.3.2",
        "DRIVER_FILES": pattern,
        "SHARED_DIR": str(tmp_path / "shared"),
        "CPUSET": "",
        **changes,
    }
    return subprocess.run(
        [*INTERPRETER, CREATE],
        env={"PATH": os.environ["PATH"], **environment},
        capture_output=True,
        text=True,
        check=False,
    )


def test_a_driver_file_name_with_a_newline_never_becomes_a_config_line(tmp_path):
    drivers = tmp_path / "drivers"
    drivers.mkdir()
    (drivers / "libcuda.so.1\nlxc.mount.auto = proc:rw sys:rw").write_text("")
    done = run_create(tmp_path, f"{drivers}/libcuda.so*")
    assert done.returncode == 1
    assert "has characters an LXC config line cannot hold" in done.stderr
    assert "gpu.driver_files" in done.stderr
    # Refused before anything changed: no container, no shared directory.
    assert not (tmp_path / "shared").exists()
    assert not Path("/var/lib/lxc/cst-c000-absent").exists()


def test_safe_driver_file_names_pass_the_check(tmp_path):
    drivers = tmp_path / "drivers"
    drivers.mkdir()
    (drivers / "libcuda.so.1").write_text("")
    done = run_create(tmp_path, f"{drivers}/libcuda.so*")
    # Past the driver files, the script stops at the missing image (nothing to clone).
    assert done.returncode == 1
    assert "node image cst-image-absent is missing" in done.stderr


def online_cpus() -> list[int]:
    cpus = []
    for part in Path("/sys/devices/system/cpu/online").read_text().strip().split(","):
        first, _, last = part.partition("-")
        cpus += range(int(first), int(last or first) + 1)
    return cpus


def script_environment(tmp_path: Path, lxc_path: Path, **changes: str) -> dict[str, str]:
    """container_create.sh's parameters for node c000 of cluster `cst` under a test's own LXC
    path, with `changes` applied."""
    return {
        "PATH": os.environ["PATH"],
        "LXC_PATH": str(lxc_path),
        "CLUSTER": "cst",
        "CLUSTER_DIR": str(tmp_path / "state"),
        "DEVICES": "",
        "IMAGE": "cst-image",
        "CONTAINER": "cst-c000",
        "NODE_HOSTNAME": "c000",
        "LXC_CONFIG": "# config",
        "NAT_ADDRESS": "10.98.3.2",
        "DRIVER_FILES": "",
        "SHARED_DIR": str(tmp_path / "shared"),
        "CPUSET": "",
        **changes,
    }


def written_cpuset(tmp_path: Path, slot: int, count: int) -> str:
    """The cpuset the script writes into a container's config on this host. The container is
    a directory of this test's own LXC path with an empty config and no rootfs: lxc-start
    fails on it, so the script stops right after writing the config."""
    lxc_path = tmp_path / "lxc"
    container = lxc_path / "cst-c000"
    container.mkdir(parents=True, exist_ok=True)
    (container / "config").write_text("")
    (container / "gpucluster-owner").write_text("cst\n")
    done = subprocess.run(
        [*INTERPRETER, CREATE],
        env=script_environment(tmp_path, lxc_path, CPUSET=f"{slot},{count}"),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode != 0 and "lxc-start" in done.stderr, done.stderr
    config = (container / "gpucluster.conf").read_text().splitlines()
    (v1,) = [line for line in config if line.startswith("lxc.cgroup.cpuset.cpus = ")]
    (v2,) = [line for line in config if line.startswith("lxc.cgroup2.cpuset.cpus = ")]
    assert v1.split(" = ")[1] == v2.split(" = ")[1]
    return v2.split(" = ")[1]


def test_nodes_are_dealt_the_hosts_online_cpus_in_turn(tmp_path):
    online = online_cpus()
    assert len(online) >= 2, "this test needs a host with two CPUs or more"
    # One-CPU nodes at slots 0, 1, 2...: each its own CPU, wrapping around past the last one.
    dealt = [written_cpuset(tmp_path, slot, 1) for slot in range(len(online) + 1)]
    assert dealt == [str(cpu) for cpu in online] + [str(online[0])]
    # Two CPUs each: the second node's pair starts where the first one's ends.
    pair = written_cpuset(tmp_path, 0, 2)
    assert pair == f"{online[0]},{online[1]}"
    assert written_cpuset(tmp_path, len(online) - 1, 2) == f"{online[0]},{online[-1]}"


def test_a_node_with_more_cpus_than_the_host_has_online_is_refused(tmp_path):
    wanted = len(online_cpus()) + 1
    done = run_create(tmp_path, CPUSET=f"0,{wanted}")
    assert done.returncode == 1
    fields = "its cpus in the stack: nodes[].cpus, login.cpus"
    assert f"c000 asks for {wanted} CPUs ({fields}) but this host has {wanted - 1} online" in done.stderr
    assert not (tmp_path / "shared").exists()


def programs_started(tmp_path: Path, others: int) -> collections.Counter:
    """The programs (by name) a create of c000 starts, up to its lxc-start (which fails on the
    test's container: no rootfs), with `others` containers of the cluster beside it."""
    lxc_path = tmp_path / f"lxc-{others}"
    for index in range(others + 1):
        container = lxc_path / f"cst-c{index:03d}"
        container.mkdir(parents=True)
        (container / "config").write_text("")
        (container / "gpucluster-owner").write_text("cst\n")
        if index:
            (container / "gpucluster.conf").write_text(f"lxc.net.0.ipv4.address = 10.98.3.{10 + index}/24\n")
    trace = tmp_path / f"trace-{others}"
    environment = script_environment(tmp_path, lxc_path, LXC_CONFIG="lxc.net.0.ipv4.address = 10.98.3.2/24")
    done = subprocess.run(
        [
            "strace",
            "-f",
            "-qq",
            "-e",
            "trace=execve",
            "-e",
            "status=successful",
            "-o",
            str(trace),
            *INTERPRETER,
            CREATE,
        ],
        env=environment,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode != 0 and "lxc-start" in done.stderr, done.stderr
    names = re.findall(r'execve\("(?:[^"]*/)?([^"/]+)"', trace.read_text())
    return collections.Counter(names[1:])  # the first is the interpreter itself


def test_a_create_starts_few_programs_on_the_host_whatever_the_cluster_size(tmp_path):
    """Each program a node's create starts costs host CPU at every node: the driver discovery
    reads the loader cache once, and the check for a renamed node holding this one's address
    starts no program per container on the host (else the creates grow with the square of
    the cluster)."""
    assert shutil.which("strace"), "strace is missing: ./test.sh installs tests/debian-packages.txt"
    one, eight = programs_started(tmp_path, 1), programs_started(tmp_path, 8)
    assert one == eight, f"programs started per other container: {eight - one}"
    assert eight["ldconfig"] == 1 and eight["uname"] == 1, eight
    # Measured: 26 up to lxc-start (53 before the helpers learnt to start fewer).
    assert sum(eight.values()) <= 32, eight
