"""Which config changes restart a running container (components/files/lib/lxc.sh): only those
that need it. Checked on the e2e stack's node config as the last release wrote it and as the
program writes it now, and on single changes of each kind."""

import json
import os
import subprocess
from pathlib import Path

from components.common.transport import helpers, script
from components.lxc.cuda_container import FILES
from tests.harness.program_harness import run_program, stack_config

SNAPSHOT = Path(__file__).resolve().parents[1] / "upgrade" / "snapshots" / "e2e.json"
DEVICE_LINES = (
    "lxc.cgroup.devices.allow = c 195:0 rwm\nlxc.cgroup2.devices.allow = c 195:0 rwm\n"
    "lxc.cgroup.devices.allow = c 195:255 rwm\nlxc.cgroup2.devices.allow = c 195:255 rwm\n"
)


CPUSET_LINES = "lxc.cgroup.cpuset.cpus = 0,1\nlxc.cgroup2.cpuset.cpus = 0,1\n"
# c000's container limit: the e2e stack sets no memory_mb, so its share of the host as the
# program's runs here measure it (16 GiB less 1 GB and slurmctld's 512 MB, by 2 of 16 CPUs), and
# slurmctld's 512 MB (components/composition/node_memory.py).
C000_LIMIT_MB = (16384 - 1024 - 512) * 2 // 16 + 512
MEMORY_LINES = (
    f"lxc.cgroup.memory.limit_in_bytes = {C000_LIMIT_MB * 2**20}\nlxc.cgroup2.memory.max = {C000_LIMIT_MB * 2**20}\n"
    "lxc.cgroup2.memory.swap.max = 0\n"
)


def lib(call: str, *args: str) -> str:
    done = subprocess.run(
        ["/bin/bash", "-c", f'{helpers()}\n{call} "$@"', "test", *args], capture_output=True, text=True, check=False
    )
    assert done.returncode in (0, 1), done.stderr
    return done.stdout if call != "lxc_needs_restart" else str(done.returncode == 0)


def needs_restart(old: str, new: str) -> bool:
    return lib("lxc_needs_restart", old, new) == "True"


def changed_keys(old: str, new: str, which: str) -> list[str]:
    return lib(f'lxc_conf_changed_keys "$1" "$2" "${which}"', old, new).split()


def release_config() -> str:
    """c000's gpucluster.conf as the last release wrote it: a driver file pattern without glob
    characters became an optional mount entry whether the file existed or not."""
    resources = json.loads(SNAPSHOT.read_text())["resources"]
    (lxc,) = [r for r in resources if r["name"] == "e2e-c000-lxc"]
    absent = "/usr/bin/nvidia-smi-absent usr/bin/nvidia-smi-absent none bind,ro,optional,create=file 0 0"
    return lxc["inputs"]["environment"]["LXC_CONFIG"] + f"\nlxc.mount.entry = {absent}\n"


def current_config() -> str:
    """c000's gpucluster.conf as the program writes it now: the rendered config, the cpuset the
    script deals from the host's online CPUs (c000 is first: CPUs 0,1 of two), its memory limit
    (MEMORY_MB) and the device lines."""
    (lxc,) = [r for r in run_program(stack_config("e2e"), stack="e2e").resources if r.name == "e2e-c000-lxc"]
    assert lxc.inputs["environment"]["MEMORY_MB"] == str(C000_LIMIT_MB)
    return lxc.inputs["environment"]["LXC_CONFIG"] + "\n" + CPUSET_LINES + MEMORY_LINES + DEVICE_LINES


def test_the_upgrade_from_the_last_release_restarts_no_node():
    old, new = release_config(), current_config()
    assert old != new
    assert not needs_restart(old, new)
    # The cpuset, and the memory limit a node now has (each cgroup version's key): both live.
    assert changed_keys(old, new, "LXC_LIVE_KEYS") == [
        "lxc.cgroup.cpuset.cpus",
        "lxc.cgroup.memory.limit_in_bytes",
        "lxc.cgroup2.cpuset.cpus",
        "lxc.cgroup2.memory.max",
        "lxc.cgroup2.memory.swap.max",
    ]
    later = changed_keys(old, new, "LXC_NEXT_START_KEYS")
    assert {"lxc.cap.drop", "lxc.apparmor.allow_nesting", "lxc.cgroup2.devices.allow"} <= set(later)


def test_comments_blank_lines_and_spacing_restart_nothing():
    new = current_config()
    edited = "# another comment\n\n" + new.replace("lxc.uts.name = c000", "lxc.uts.name=c000  ")
    assert not needs_restart(new, edited)
    assert changed_keys(new, edited, "LXC_LIVE_KEYS") == changed_keys(new, edited, "LXC_NEXT_START_KEYS") == []


def test_a_new_address_a_new_gpu_or_a_new_mount_restarts():
    new = current_config()
    assert needs_restart(new, new.replace("10.43.3.2/24", "10.43.3.9/24"))
    # A device the host has (an absent source is an optional mount that mounts nothing).
    gpu = "lxc.mount.entry = /dev/null dev/nvidia1 none bind,optional,create=file 0 0\n"
    assert needs_restart(new, new + gpu)
    assert needs_restart(new + gpu, new)
    present = "lxc.mount.entry = /bin/sh bin/sh-too none bind,ro,optional,create=file 0 0\n"
    assert needs_restart(new + present, new), "an optional mount whose source exists is a real mount"


def test_a_new_memory_limit_is_live():
    new = current_config()
    smaller = new.replace(f"= {C000_LIMIT_MB * 1024 * 1024}", f"= {1280 * 1024 * 1024}")
    assert smaller != new and not needs_restart(new, smaller)
    assert changed_keys(new, smaller, "LXC_LIVE_KEYS") == ["lxc.cgroup.memory.limit_in_bytes", "lxc.cgroup2.memory.max"]


def test_a_new_cpuset_is_live_and_other_devices_wait_for_the_next_start():
    new = current_config()
    cpus = new.replace("cpuset.cpus = 0,1", "cpuset.cpus = 1")
    assert not needs_restart(new, cpus)
    assert changed_keys(new, cpus, "LXC_LIVE_KEYS") == ["lxc.cgroup.cpuset.cpus", "lxc.cgroup2.cpuset.cpus"]
    devices = new.replace("c 195:255 rwm", "c 195:254 rwm")
    assert not needs_restart(new, devices)
    assert changed_keys(new, devices, "LXC_NEXT_START_KEYS") == [
        "lxc.cgroup.devices.allow",
        "lxc.cgroup2.devices.allow",
    ]


# lxc-* and ip as shell functions that record their calls: the container "runs" and answers;
# it holds $HELD bytes (lxc-cgroup's read of memory.usage_in_bytes).
FAKES = """
lxc_fake() { printf '%s\\n' "$*" >> "$CALLS"; }
for c in lxc-info lxc-stop lxc-start lxc-copy lxc-destroy; do
  eval "$c() { lxc_fake $c \\"\\$@\\"; [ $c != lxc-info ] || echo RUNNING; }"
done
lxc-cgroup() {
  lxc_fake lxc-cgroup "$@"
  case "$#:$3" in 3:memory.usage_in_bytes) echo "$HELD" ;; esac
}
lxc-attach() {
  lxc_fake lxc-attach "$@"
  # One attach waits for the boot and prints the state, the addresses and the hostname.
  case "$*" in *is-system-running*) printf 'running\n 10.43.3.2/24\nc000\n' ;; esac
}
ip() { :; }
"""


def rerun_create(tmp_path: Path, on_disk: str, held_mb: int = 300) -> tuple[subprocess.CompletedProcess, list[str]]:
    """container_create.sh of the current program over a running c000 whose config is `on_disk`."""
    (lxc,) = [r for r in run_program(stack_config("e2e"), stack="e2e").resources if r.name == "e2e-c000-lxc"]
    container = tmp_path / "lxc" / "e2e-c000"
    container.mkdir(parents=True)
    (container / "config").write_text("lxc.rootfs.path = overlay:/nowhere\n")
    (container / "gpucluster-owner").write_text("e2e\n")
    (container / "gpucluster.conf").write_text(on_disk)
    calls = tmp_path / "calls"
    calls.touch()
    header = "# ---- container_create.sh ----"
    text = script(FILES / "container_create.sh").replace(header, FAKES + header)
    environment = {
        **lxc.inputs["environment"],
        "LXC_PATH": str(tmp_path / "lxc"),
        "CLUSTER_DIR": str(tmp_path / "state"),
        "SHARED_DIR": str(tmp_path / "shared"),
        "CALLS": str(calls),
        "HELD": str(held_mb * 1024 * 1024),
        "PATH": os.environ["PATH"],
    }
    done = subprocess.run(["/bin/bash", "-c", text], env=environment, capture_output=True, text=True, check=False)
    return done, calls.read_text().splitlines()


def test_the_create_over_a_container_of_the_last_release_keeps_it_running(tmp_path):
    done, calls = rerun_create(tmp_path, release_config())
    assert done.returncode == 0, done.stderr
    assert [call for call in calls if call.startswith(("lxc-stop", "lxc-start"))] == []
    assert "lxc-cgroup -n e2e-c000 cpuset.cpus 0,1" in calls
    # c000's limit (C000_LIMIT_MB), with this host's (v1) key.
    assert f"lxc-cgroup -n e2e-c000 memory.limit_in_bytes {C000_LIMIT_MB * 1024 * 1024}" in calls
    assert "lxc.cgroup.memory.limit_in_bytes lxc.cgroup2.cpuset.cpus" in done.stderr
    assert "applied to the running container" in done.stderr
    assert "lxc.cap.drop" in done.stderr and "until it next starts" in done.stderr


def test_the_create_never_lowers_a_running_container_below_what_it_holds(tmp_path):
    # c000 holds 100 MB more than its new limit: the limit waits for its next start.
    done, calls = rerun_create(tmp_path, release_config(), held_mb=C000_LIMIT_MB + 100)
    assert done.returncode == 0, done.stderr
    assert [call for call in calls if call.startswith(("lxc-stop", "lxc-start"))] == []
    assert [call for call in calls if "memory.limit_in_bytes" in call] == []
    assert "lxc-cgroup -n e2e-c000 cpuset.cpus 0,1" in calls
    assert (
        f"e2e-c000: holds {C000_LIMIT_MB + 100} MB, more than its new memory limit of {C000_LIMIT_MB} MB: the running "
        "container keeps its "
        "current limit until it next starts (no restart, its jobs go on)" in done.stderr
    )
    assert "e2e-c000: lxc.cgroup.cpuset.cpus lxc.cgroup2.cpuset.cpus applied to the running container" in done.stderr
    assert (
        f"lxc.cgroup.memory.limit_in_bytes = {C000_LIMIT_MB * 1024 * 1024}"
        in (tmp_path / "lxc" / "e2e-c000" / "gpucluster.conf").read_text()
    )


def test_the_create_restarts_a_container_whose_address_changed(tmp_path):
    done, calls = rerun_create(tmp_path, current_config().replace("10.43.3.2/24", "10.43.3.9/24"))
    assert done.returncode == 0, done.stderr
    assert "lxc-stop -n e2e-c000 -t 30" in calls
    assert "lxc.net.0.ipv4.address changed, which only a restart applies: restarting (its jobs end)" in done.stderr
