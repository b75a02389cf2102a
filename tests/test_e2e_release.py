"""End-to-end: the e2e stack on a trixie node image (Debian 13, systemd 257, Slurm 24.11) on this
cgroup v1 host, through the real engine: the program builds the image, boots its systemd in
every node, runs slurmctld and slurmd 24.11, and the health gate's `srun -N4 hostname` and GPU
job pass; then `srun -N4 hostname` and a GPU job from the controller's node, and destroy.

It is also the cluster of a host with no Slurm at all: the run is started in a mount namespace
of its own where every file of the host's Slurm and munge packages is hidden (an empty file
bound over it) and dpkg's database lists none of them. The program needs none: the cluster's
Slurm and munge, its clients included, run from the node image.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.harness.program_harness import ROOT
from tests.test_e2e import leftovers, require_host

pytestmark = pytest.mark.e2e

# The host's Slurm and munge packages, hidden from the run.
HIDDEN = re.compile(r"^(lib)?(slurm|munge)")


def host_slurm_packages() -> list[str]:
    listed = subprocess.run(["dpkg-query", "-W", "-f", "${Package}\\n"], capture_output=True, text=True, check=True)
    return [name for name in listed.stdout.split() if HIDDEN.match(name)]


def dpkg_status_without(packages: list[str]) -> str:
    """dpkg's status file without the stanzas of `packages`."""
    stanzas = Path("/var/lib/dpkg/status").read_text().split("\n\n")
    kept = [s for s in stanzas if not any(line in s.splitlines() for line in (f"Package: {p}" for p in packages))]
    return "\n\n".join(kept)


def run_without_host_slurm(release: str, tmp: Path) -> subprocess.CompletedProcess:
    packages = host_slurm_packages()
    files = []
    for package in packages:
        listed = subprocess.run(["dpkg", "-L", package], capture_output=True, text=True, check=True).stdout.split("\n")
        files += [f for f in listed if f and Path(f).is_file() and not Path(f).is_symlink()]
    (tmp / "status").write_text(dpkg_status_without(packages))
    (tmp / "files").write_text("".join(f"{f}\n" for f in files))
    script = (
        'set -e; mount --bind "$1/status" /var/lib/dpkg/status; '
        'while read -r f; do mount --bind /dev/null "$f"; done < "$1/files"; '
        'cd "$2" && exec "$3" -m tests.harness.release_e2e "$4" ' + " ".join(packages)
    )
    return subprocess.run(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            "sh",
            str(tmp),
            str(ROOT),
            sys.executable,
            release,
        ],
        capture_output=True,
        text=True,
        timeout=2400,
        check=False,
        env=os.environ,
    )


def test_a_trixie_cluster_runs_slurm_2411_here(capsys):
    require_host()
    assert shutil.which("unshare"), "unshare (util-linux) is missing"
    with tempfile.TemporaryDirectory() as tmp:
        done = run_without_host_slurm("trixie", Path(tmp))
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0 and lines, f"the run failed:\n{done.stdout[-4000:]}\n{done.stderr[-8000:]}"
    assert leftovers("e2e") == [], "destroy left these"
    report = json.loads(lines[-1])
    with capsys.disabled():
        print("\n" + json.dumps(report, indent=1))
    # The host had no Slurm: dpkg knew none of its packages and no Slurm or munge program ran.
    assert report["host_packages_known"] == [] and report["host_programs"] == []
    assert report["os"].startswith("Debian GNU/Linux 13")
    assert report["systemd"].startswith("systemd 257")
    assert report["system_state"] in ("running", "degraded")
    assert report["slurmd"].startswith("slurm-wlm 24.11") and report["slurmctld"].startswith("slurm-wlm 24.11")
    assert report["srun_N4_hostname"] == ["c000", "c001", "c002", "c003"]
    assert "CUDA_VISIBLE_DEVICES=0" in report["gpu_job"]
    assert [line for line in report["gpu_job"] if line.startswith("nvidia")] == ["nvidia2"]
    check_jobs_in_container_images(report["containers"])
    check_the_stacks_registry(report["stack_registry"])
    # Job accounting by the release's slurmdbd; the controller's row of the change table.
    assert report["slurmdbd"].startswith("slurm-wlm 24.11") and report["accounted_gpu_jobs"], report
    assert any(line.startswith("e2e-slurm-slurmctld ") for line in report["controller_moved"]), report
    assert "e2e-slurmctld-container-lxc create" in report["controller_moved"], report["controller_moved"]
    assert report["held_after_move"] == "PENDING", "the queue was lost moving the controller"
    # A job that ran across the move: c000's address answered for the moved slurmctld (DNAT,
    # OUTPUT and SNAT, FORWARD accept), so its end was recorded when it ended.
    assert report["across_before_move"] == report["across_after_move"] == "RUNNING", report
    assert report["forwards_in_c000"] == 4, report
    assert report["across_ended"] == "COMPLETED", report
    assert report["slurmctld_in"].startswith("slurm-wlm 24.11") and report["slurmctld_in"].endswith("running")
    assert report["srun_after_move"] == ["c000", "c001", "c002", "c003"]
    # The image's row: rebuilt, every container replaced, the queue and the records kept.
    assert "e2e-image-rootfs replace" in report["image_rebuilt"], report["image_rebuilt"]
    for node in ("c000", "c001", "c002", "c003"):
        assert f"e2e-{node}-lxc replace" in report["image_rebuilt"], report["image_rebuilt"]
    assert "e2e-slurmctld-container-lxc replace" in report["image_rebuilt"], report["image_rebuilt"]
    assert report["less_in_c002"] == "/usr/bin/less"
    assert report["held_after_rebuild"] == "PENDING", "the queue was lost rebuilding the image"
    assert set(report["accounted_gpu_jobs"]) <= set(report["accounted_after_rebuild"]), report
    assert report["srun_after_rebuild"] == ["c000", "c001", "c002", "c003"]


def check_jobs_in_container_images(report: dict) -> None:
    """tests/harness/containers_e2e.py's report: Pyxis and Enroot as alice and bob use them."""
    # The image's system, not the node's, the second time from the node's cache.
    assert report["os_release"] == report["os_release_again"] == ['PRETTY_NAME="gpucluster test image (busybox)"']
    assert report["node_os"].startswith("Debian GNU/Linux 13"), report
    assert int(report["cached_layers"]) >= 1, report
    # sbatch from shared_dir/alice: the script ran in the container, its output and its file hers.
    # (Pyxis's own lines, "pyxis: importing docker image: ...", are the job's output too.)
    said = [line for line in report["sbatch"] if not line.startswith(("Submitted batch job", "pyxis: "))]
    assert said == [
        'PRETTY_NAME="gpucluster test image (busybox)"',
        "alice",
        "/srv/gpucluster/e2e/shared/alice",
        "alice container.out",
        "alice from-container",
    ], report["sbatch"]
    # The job's GPU only, inside as outside: its own opens (no driver: ENXIO), the other refused.
    assert report["gpus_inside"] == report["gpus_outside"], report
    assert sorted(report["gpus_inside"].values()) == ["No such device or address", "Operation not permitted"], report
    # The container runs on the job's one CPU, within its memory (--mem=64M).
    assert report["confined"] == ["1", str(64 * 1024 * 1024)], report["confined"]
    # Each person's directories are theirs alone.
    assert sorted(line.split()[:2] for line in report["enroot_dirs"]) == [
        ["alice", "700"],
        ["alice", "700"],
        ["bob", "700"],
        ["bob", "700"],
    ], report["enroot_dirs"]
    assert report["bob_reads_alices_cache"].startswith(("1 ", "2 ")), report
    assert "Permission denied" in report["bob_reads_alices_cache"], report
    # A missing image, a missing registry: the job fails saying why, and leaves nothing.
    missing = report["missing_image"]
    assert missing["rc"] != 0 and any("404" in line for line in missing["stderr"]), report
    assert report["missing_registry"]["rc"] != 0, report
    assert any("5999" in line or "onnect" in line for line in report["missing_registry"]["stderr"]), report
    assert report["left_after_failures"] == "", report
    # scancel ends the container's processes.
    assert "sleep 600" in report["running_before_scancel"], report
    assert report["left_after_scancel"] == "", report


def check_the_stacks_registry(report: dict) -> None:
    """tests/harness/containers_e2e.py's the_stacks_registry: pushed by the operator, pulled by
    a person's job, refused to every person's push; its CA's key root's only."""
    assert report["os_release"] == report["image_os_release"], report
    # The pull port is read-only (the upload's method is not served); the push port wants the account.
    assert report["person_push_at_pull_port"] == "405", report
    assert report["person_push_at_push_port"] == "401", report
    assert report["ca_key"] == "0o600 uid 0, under 0o700 uid 0", report
