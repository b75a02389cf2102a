"""End-to-end: the e2e stack on a trixie node image (Debian 13, systemd 257, Slurm 24.11) on this
cgroup v1 host, through the real engine: the program builds the image, boots its systemd in
every node, runs slurmctld and slurmd 24.11, and the health gate's `srun -N4 hostname` and GPU
job pass; then `srun -N4 hostname` and a GPU job from the controller's node, and destroy.

This host's slurm-client is 22.05, which a 24.11 slurmctld refuses ("Incompatible versions of
client and server code"); tests/harness/release_e2e.py says how the run stands in for it (the
image's client, in the controller's container, inside a mount namespace of the run's own).
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.harness.program_harness import ROOT
from tests.test_e2e import require_host

pytestmark = pytest.mark.e2e

CLIENTS = ("sacct", "sacctmgr", "sbatch", "scancel", "scontrol", "sdiag", "sinfo", "sprio", "squeue", "srun", "sshare")
WRAPPER = """#!/bin/sh
# The node image's Slurm client in place of this host's (tests/harness/release_e2e.py).
exec lxc-attach -n e2e-c000 --clear-env -v PATH=/usr/sbin:/usr/bin:/sbin:/bin -- "$(basename "$0")" "$@"
"""


def run_in_namespace(release: str, wrapper: Path) -> subprocess.CompletedProcess:
    binds = "".join(f'mount --bind "$1" /usr/bin/{name} && ' for name in CLIENTS if Path(f"/usr/bin/{name}").exists())
    script = f'set -e; {binds}cd "$2" && exec "$3" -m tests.harness.release_e2e "$4"'
    argv = [str(wrapper), str(ROOT), sys.executable, release]
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *argv],
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
        wrapper = Path(tmp) / "slurm-client"
        wrapper.write_text(WRAPPER)
        wrapper.chmod(0o755)
        done = run_in_namespace("trixie", wrapper)
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0 and lines, f"the run failed:\n{done.stdout[-4000:]}\n{done.stderr[-8000:]}"
    report = json.loads(lines[-1])
    with capsys.disabled():
        print("\n" + json.dumps(report, indent=1))
    assert report["os"].startswith("Debian GNU/Linux 13")
    assert report["systemd"].startswith("systemd 257")
    assert report["system_state"] in ("running", "degraded")
    assert report["slurmd"].startswith("slurm-wlm 24.11") and report["slurmctld"].startswith("slurm-wlm 24.11")
    assert report["srun_N4_hostname"] == ["c000", "c001", "c002", "c003"]
    assert "CUDA_VISIBLE_DEVICES=0" in report["gpu_job"]
    assert [line for line in report["gpu_job"] if line.startswith("nvidia")] == ["nvidia2"]
