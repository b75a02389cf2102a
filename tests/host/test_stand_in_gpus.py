"""Stand-in GPUs (gpu.stand_in) on this machine: the `nogpu` stack's own commands make them only
in the cluster's private device directory, the preflight accepts them, a real NVIDIA driver
makes the program refuse them before anything changes, and the delete removes them.
Needs root (mknod, a private mount namespace)."""

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from tests.harness.command_executor import HostCommand, host_commands
from tests.harness.program_harness import run_program, stack_config

# Character devices (mknod) in a tmpfs it mounts.
pytestmark = pytest.mark.privileged

STACK = "nogpu"
DEVICE_DIR = Path("/run/gpucluster-nogpu-dev")


def commands(count: int | None = None) -> dict[str, HostCommand]:
    config = stack_config(STACK)
    if count is not None:
        config["cluster"]["gpu"] = {"stand_in": {"count": count}}
        for i, node in enumerate(config["cluster"]["nodes"]):
            node["gpus"] = 1 if i < count else 0
    return {command.name: command for command in host_commands(run_program(config, stack=STACK))}


def run(command: HostCommand, script: str, *, environment: dict | None = None, driver: bool = False):
    """Run one of the command's scripts as the engine would; `driver` fakes /proc/driver/nvidia
    in a private mount namespace (the host's /proc is not touched)."""
    argv = [*command.interpreter, script]
    if driver:
        fake = 'mount --make-rprivate / && mount -t tmpfs none /proc/driver && mkdir /proc/driver/nvidia && exec "$@"'
        argv = ["unshare", "-m", "sh", "-c", fake, "sh", *argv]
    return subprocess.run(
        argv,
        env={**os.environ, **command.environment, **(environment or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def devices() -> dict[str, tuple[int, int, int]]:
    """Character devices in the directory: name -> (major, minor, mode)."""
    found = {}
    for path in DEVICE_DIR.iterdir():
        info = path.lstat()
        if stat.S_ISCHR(info.st_mode):
            found[path.name] = (os.major(info.st_rdev), os.minor(info.st_rdev), stat.S_IMODE(info.st_mode))
    return found


def dev_nvidia() -> list[str]:
    return sorted(str(path) for path in Path("/dev").glob("nvidia*"))


@pytest.fixture
def stand_in():
    assert os.geteuid() == 0, "the stand-in GPU tests need root (mknod, mount namespaces)"
    assert not Path("/proc/driver/nvidia").exists(), "this machine has an NVIDIA driver: stand-ins are refused here"
    assert not DEVICE_DIR.exists(), f"{DEVICE_DIR} exists: is a `nogpu` cluster up on this machine?"
    command = commands()["nogpu-host-stand-in-gpus"]
    yield command
    run(command, command.delete)
    left = sorted(path.name for path in DEVICE_DIR.iterdir()) if DEVICE_DIR.exists() else None
    shutil.rmtree(DEVICE_DIR, ignore_errors=True)
    assert left is None, f"the delete left {DEVICE_DIR}: {left}"


def test_the_stand_ins_are_made_in_the_private_directory_and_pass_the_preflight(stand_in):
    before = dev_nvidia()
    made = run(stand_in, stand_in.create)
    assert made.returncode == 0, made.stderr
    expected = {**{f"nvidia{i}": (195, i, 0o666) for i in range(4)}, "nvidiactl": (195, 255, 0o666)}
    assert devices() == expected
    assert dev_nvidia() == before, "a stand-in was made under /dev"

    # The stack's own preflight, which runs after them, accepts them as GPUs.
    preflight = commands()["nogpu-host-preflight"]
    assert stand_in.urn in preflight.dependencies
    checked = run(preflight, preflight.create)
    assert checked.returncode == 0, checked.stderr
    assert f"{DEVICE_DIR}/nvidia3" in checked.stdout

    # Again: nothing changes (same inodes).
    inodes = {path.name: path.stat().st_ino for path in DEVICE_DIR.iterdir()}
    again = run(stand_in, stand_in.create)
    assert again.returncode == 0 and "made stand-in" not in again.stderr
    assert {path.name: path.stat().st_ino for path in DEVICE_DIR.iterdir()} == inodes


def test_a_changed_count_converges(stand_in):
    assert run(stand_in, stand_in.create).returncode == 0
    (DEVICE_DIR / "nvidia1").unlink()
    (DEVICE_DIR / "nvidia1").write_text("not a device")
    fewer = commands(count=2)["nogpu-host-stand-in-gpus"]
    done = run(fewer, fewer.create)
    assert done.returncode == 0, done.stderr
    assert devices() == {"nvidia0": (195, 0, 0o666), "nvidia1": (195, 1, 0o666), "nvidiactl": (195, 255, 0o666)}
    assert sorted(path.name for path in DEVICE_DIR.iterdir()) == ["nvidia0", "nvidia1", "nvidiactl"]


def test_refused_where_an_nvidia_driver_is_loaded_and_nothing_changes(stand_in):
    done = run(stand_in, stand_in.create, driver=True)
    assert done.returncode == 1
    assert (
        "error: this host has an NVIDIA driver (/proc/driver/nvidia): gpu.stand_in is for machines without "
        "a GPU; remove it and list the real devices in gpu.devices (e.g. /dev/nvidia0). Nothing was changed."
    ) in done.stderr
    assert not DEVICE_DIR.exists()


@pytest.mark.parametrize("directory", ["/dev", "/run/gpucluster-other-dev", "/run/gpucluster-nogpu-dev/../x"])
def test_only_the_clusters_own_directory(stand_in, directory):
    before = dev_nvidia()
    done = run(stand_in, stand_in.create, environment={"DEVICE_DIR": directory})
    assert done.returncode == 1
    assert "stand-in GPUs live only in the cluster's device directory /run/gpucluster-nogpu-dev" in done.stderr
    assert dev_nvidia() == before
    assert not any(Path(path).exists() for path in ("/run/gpucluster-other-dev", "/run/x", DEVICE_DIR))


def test_the_delete_removes_only_stand_ins_and_succeeds_when_they_are_gone(stand_in):
    assert run(stand_in, stand_in.create).returncode == 0
    foreign = DEVICE_DIR / "notes.txt"
    foreign.write_text("someone else's")
    kept = run(stand_in, stand_in.delete)
    assert kept.returncode == 0, kept.stderr
    assert sorted(path.name for path in DEVICE_DIR.iterdir()) == ["notes.txt"]
    assert "kept /run/gpucluster-nogpu-dev: it holds files that are not stand-in GPUs" in kept.stderr
    foreign.unlink()
    for _ in range(2):
        gone = run(stand_in, stand_in.delete)
        assert gone.returncode == 0, gone.stderr
        assert not DEVICE_DIR.exists()
