"""A running container's memory limit is never lowered below what it holds
(components/files/lib/lxc_config.sh: lxc_apply_limits): cgroup v2 would OOM-kill its jobs until
they fit, v1 refuses the write (and the create used to restart the container for it). The
new limit waits for the container's next start, and the output says so; a raise applies live.

On this host's real memory cgroup (v1 or v2, whichever it has) with a process holding 200 MB
(privileged), and on a fake v2 tree (memory.current, memory.max, memory.swap.max) for v2's file
names where the host has v1."""

import subprocess
import uuid
from pathlib import Path

import pytest

from components.common.transport import helpers

MB = 1024 * 1024
CGROUPS = Path("/sys/fs/cgroup")
V2 = (CGROUPS / "cgroup.controllers").exists()

# lxc-cgroup as the function the helpers call: reads or writes the container's cgroup file
# under $CG (the real cgroup, or the fake tree), as `lxc-cgroup -n NAME KEY [VALUE]` does; the
# cpuset goes to $CPUSET (a real v1 memory cgroup has no cpuset file). Calls go to $CALLS.
FAKE_LXC_CGROUP = """
lxc-cgroup() {
  local file=$CG/$3
  printf '%s\\n' "$*" >> "$CALLS"
  [[ $3 != cpuset.* ]] || file=$CPUSET
  if [ $# -eq 3 ]; then cat "$file"; else printf '%s\\n' "$4" > "$file"; fi
}
"""


def apply_limits(cgroup: Path, config: str, cgroup_fs: Path, files: Path) -> subprocess.CompletedProcess:
    text = f'{helpers()}\n{FAKE_LXC_CGROUP}\nlxc_apply_limits c001 "$1"; echo "status=$? deferred=$LXC_MEMORY_DEFERRED"'
    environment = {"CG": str(cgroup), "CGROUP_FS": str(cgroup_fs), "CALLS": str(files / "calls")}
    return subprocess.run(
        ["/bin/bash", "-c", text, "test", config],
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", **environment, "CPUSET": str(files / "cpuset")},
        capture_output=True,
        text=True,
        timeout=60,
    )


def config(limit_mb: int) -> str:
    limit = limit_mb * MB
    return (
        "lxc.cgroup.cpuset.cpus = 0\nlxc.cgroup2.cpuset.cpus = 0\n"
        f"lxc.cgroup.memory.limit_in_bytes = {limit}\nlxc.cgroup2.memory.max = {limit}\n"
        "lxc.cgroup2.memory.swap.max = 0\n"
    )


@pytest.mark.privileged
def test_a_limit_below_what_a_real_cgroup_holds_waits_and_a_raise_applies(tmp_path):
    # This host's hierarchy: v2's root (memory enabled for its children), else v1's memory one.
    root = CGROUPS if V2 else CGROUPS / "memory"
    usage_file, limit_file = (
        ("memory.current", "memory.max") if V2 else ("memory.usage_in_bytes", "memory.limit_in_bytes")
    )
    cgroup = root / f"gpucluster-test-{uuid.uuid4().hex[:8]}"
    cgroup.mkdir()
    holder = None
    try:
        # A process in the cgroup that touches 200 MB of its own (anonymous: without swap, never reclaimed).
        holder = subprocess.Popen(
            [
                "/bin/sh",
                "-c",
                f"echo $$ > {cgroup}/cgroup.procs && exec python3 -c "
                '\'import time; b = bytearray(200 * 2**20); b[::4096] = b"x" * len(b[::4096]); '
                'print("held", flush=True); time.sleep(300)\'',
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert holder.stdout.readline().strip() == "held"
        assert int((cgroup / usage_file).read_text()) > 200 * MB
        before = (cgroup / limit_file).read_text()

        lower = apply_limits(cgroup, config(120), CGROUPS, tmp_path)
        assert "status=0 deferred=1" in lower.stdout, lower.stderr
        assert (cgroup / limit_file).read_text() == before, "the lower limit was written"
        assert holder.poll() is None, "the process holding the memory ended"
        held = int(lower.stderr.split("c001: holds ", 1)[1].split(" MB")[0])
        assert 200 <= held < 400, lower.stderr
        assert "more than its new memory limit of 120 MB" in lower.stderr
        assert "keeps its current limit until it next starts" in lower.stderr
        assert (tmp_path / "cpuset").read_text() == "0\n", "the cpuset still applies live"

        higher = apply_limits(cgroup, config(512), CGROUPS, tmp_path)
        assert "status=0 deferred=\n" in higher.stdout, higher.stderr
        assert int((cgroup / limit_file).read_text()) == 512 * MB
        assert holder.poll() is None
        assert higher.stderr == ""
    finally:
        if holder is not None:
            holder.kill()
            holder.wait()
        for _ in range(50):
            if subprocess.run(["rmdir", str(cgroup)], capture_output=True).returncode == 0:
                break
            subprocess.run(["sleep", "0.1"])


def fake_v2(tmp_path: Path, current_mb: int, inactive_file_mb: int = 0) -> tuple[Path, Path]:
    """A cgroup v2 root (its cgroup.controllers) and a container cgroup holding current_mb."""
    root = tmp_path / "cgroup"
    cgroup = root / "lxc.payload.c001"
    cgroup.mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (cgroup / "memory.current").write_text(f"{current_mb * MB}\n")
    (cgroup / "memory.stat").write_text(f"anon {current_mb * MB}\nfile 0\ninactive_file {inactive_file_mb * MB}\n")
    (cgroup / "memory.max").write_text("max\n")
    (cgroup / "memory.swap.max").write_text("max\n")
    return root, cgroup


def test_v2_a_limit_below_memory_current_waits_for_the_next_start(tmp_path):
    root, cgroup = fake_v2(tmp_path, current_mb=1400)
    done = apply_limits(cgroup, config(1280), root, tmp_path)
    assert "status=0 deferred=1" in done.stdout, done.stderr
    assert (cgroup / "memory.max").read_text() == "max\n"
    assert (cgroup / "memory.swap.max").read_text() == "max\n", "the swap limit goes with the memory limit"
    assert (
        "c001: holds 1400 MB, more than its new memory limit of 1280 MB: the running container keeps its current "
        "limit until it next starts (no restart, its jobs go on)" in done.stderr
    )
    assert "-n c001 memory.current" in (tmp_path / "calls").read_text()
    assert (tmp_path / "cpuset").read_text() == "0\n", "the cpuset still applies live"


def test_v2_a_limit_above_what_the_container_holds_applies_live(tmp_path):
    # 1400 MB of which 300 MB are inactive file cache the kernel drops first: 1100 MB held.
    root, cgroup = fake_v2(tmp_path, current_mb=1400, inactive_file_mb=300)
    done = apply_limits(cgroup, config(1280), root, tmp_path)
    assert "status=0 deferred=\n" in done.stdout, done.stderr
    assert (cgroup / "memory.max").read_text() == f"{1280 * MB}\n"
    assert (cgroup / "memory.swap.max").read_text() == "0\n"
    assert done.stderr == ""


def test_an_unreadable_usage_lowers_nothing(tmp_path):
    root, cgroup = fake_v2(tmp_path, current_mb=100)
    (cgroup / "memory.current").unlink()
    done = apply_limits(cgroup, config(1280), root, tmp_path)
    assert "status=0 deferred=1" in done.stdout, done.stderr
    assert (cgroup / "memory.max").read_text() == "max\n"


def test_no_limit_in_the_config_lifts_the_limit_whatever_the_container_holds(tmp_path):
    root, cgroup = fake_v2(tmp_path, current_mb=4000)
    (cgroup / "memory.max").write_text(f"{1280 * MB}\n")
    done = apply_limits(cgroup, "lxc.cgroup2.cpuset.cpus = 0\n", root, tmp_path)
    assert "status=0 deferred=\n" in done.stdout, done.stderr
    assert (cgroup / "memory.max").read_text() == "max\n"
