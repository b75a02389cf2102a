"""The kernel limits the node containers need (components/files/lib/kernel_limits.sh): raised by
each cluster's share over what the host had, persisted in a file of the cluster's own, never
lowered below the host's values, and given back by the destroy. On a scratch /proc/sys and
/etc/sysctl.d."""

import subprocess
from pathlib import Path

import pytest

from components.common.transport import helpers
from components.host.gpu_host import KERNEL_LIMITS_PER_CONTAINER

INSTANCES = "fs.inotify.max_user_instances"
WATCHES = "fs.inotify.max_user_watches"


@pytest.fixture
def host(tmp_path: Path) -> Path:
    for key, value in ((INSTANCES, 128), (WATCHES, 65536)):
        path = tmp_path / "proc" / key.replace(".", "/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{value}\n")
    (tmp_path / "sysctl.d").mkdir()
    return tmp_path


def run(host: Path, call: str, *args: str) -> subprocess.CompletedProcess:
    environment = {
        "KERNEL_LIMITS_PROC": str(host / "proc"),
        "KERNEL_LIMITS_DIR": str(host / "sysctl.d"),
        "KERNEL_LIMITS_LOCK": str(host / "lock"),
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
    }
    done = subprocess.run(
        ["/bin/bash", "-c", f'{helpers()}\n{call} "$@"', "test", *args],
        env=environment,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done


def live(host: Path, key: str = INSTANCES) -> int:
    return int((host / "proc" / key.replace(".", "/")).read_text())


def up(host: Path, cluster: str, instances: int, watches: int = 0) -> None:
    shares = f"{INSTANCES} {instances}" + (f"\n{WATCHES} {watches}" if watches else "")
    run(host, "kernel_limits_set", cluster, str(host / "sysctl.d" / f"90-gpucluster-{cluster}.conf"), shares)


def down(host: Path, cluster: str) -> None:
    run(host, "kernel_limits_set", cluster, str(host / "sysctl.d" / f"90-gpucluster-{cluster}.conf"), "")


def test_a_cluster_raises_its_share_persists_it_and_gives_it_back(host):
    up(host, "a", 1024, 262144)
    assert live(host) == 128 + 1024 and live(host, WATCHES) == 65536 + 262144
    file = host / "sysctl.d" / "90-gpucluster-a.conf"
    text = file.read_text()
    assert f"{INSTANCES} = 1152\n" in text and f"# baseline {INSTANCES} 128\n" in text
    assert f"{WATCHES} = 327680\n" in text
    # Applied twice: nothing changes, and the second run says nothing.
    again = run(host, "kernel_limits_set", "a", str(file), f"{INSTANCES} 1024\n{WATCHES} 262144")
    assert again.stderr == "" and file.read_text() == text and live(host) == 1152
    down(host, "a")
    assert live(host) == 128 and live(host, WATCHES) == 65536
    assert list((host / "sysctl.d").iterdir()) == []


def test_a_host_with_more_keeps_it(host):
    (host / "proc/fs/inotify/max_user_instances").write_text("8192\n")
    up(host, "a", 1024)
    assert live(host) == 8192 + 1024
    down(host, "a")
    assert live(host) == 8192


def test_a_value_raised_since_by_someone_else_is_left_alone(host):
    up(host, "a", 1024)
    (host / "proc/fs/inotify/max_user_instances").write_text("50000\n")
    down(host, "a")
    assert live(host) == 50000


def test_a_smaller_cluster_gives_back_what_it_no_longer_needs(host):
    up(host, "a", 1024)
    up(host, "a", 64)
    assert live(host) == 128 + 64


def test_clusters_add_their_shares_and_each_destroy_gives_back_its_own(host):
    up(host, "a", 1024)
    up(host, "b", 256)
    assert live(host) == 128 + 1024 + 256
    down(host, "a")
    assert live(host) == 128 + 256
    down(host, "b")
    assert live(host) == 128


def test_after_a_boot_every_share_is_back(host):
    up(host, "a", 1024)
    up(host, "b", 256)
    # systemd-sysctl applied the files in name order: the last one's value, b's.
    (host / "proc/fs/inotify/max_user_instances").write_text("1408\n")
    run(host, "kernel_limits_boot")
    assert live(host) == 128 + 1024 + 256


def test_the_share_is_sized_by_the_containers():
    assert KERNEL_LIMITS_PER_CONTAINER[INSTANCES] * 64 >= 1024
