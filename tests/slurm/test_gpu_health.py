"""gpu_health.sh (slurmd's HealthCheckProgram) on device nodes made here: stand-ins (NVIDIA's
major 195, no driver: they answer ENXIO) need no nvidia-smi; a node whose GPUs a driver
answers (here: a character device with /dev/null's numbers, which opens) drains when its
nvidia-smi is missing, an empty bind placeholder, or broken; it was a silent skip before
(the H100 review of 2026-11-25, finding 3). sinfo and scontrol are stubs."""

import os
import subprocess
from pathlib import Path

import pytest

from components.slurm.node import FILES

HEALTH = FILES / "gpu_health.sh"
pytestmark = pytest.mark.privileged  # mknod


def stub(directory: Path, name: str, text: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text(f"#!/bin/sh\n{text}")
    (directory / name).chmod(0o755)


def run_health(tmp_path: Path, major: int, minor: int, smi: str | None = None, smi_mode: int = 0o755):
    """One GPU (a device node with these numbers) and `smi` as the node's nvidia-smi (None:
    none on PATH). Returns (the run, the scontrol calls)."""
    assert os.geteuid() == 0, "mknod needs root"
    device = tmp_path / "nvidia0"
    os.mknod(device, 0o20666, os.makedev(major, minor))
    conf = tmp_path / "gpu-health.conf"
    conf.write_text(f"{device} {major}:{minor}\n")
    bin_dir = tmp_path / "bin"
    calls = tmp_path / "scontrol-calls"
    stub(bin_dir, "sinfo", 'echo "idle|gpu:1|none"\n')
    stub(bin_dir, "scontrol", f'echo "$*" >> {calls}\n')
    if smi is not None:
        stub(bin_dir, "nvidia-smi", smi)
        (bin_dir / "nvidia-smi").chmod(smi_mode)
        if not smi:
            (bin_dir / "nvidia-smi").write_text("")
    done = subprocess.run(
        ["/bin/bash", str(HEALTH)],
        env={"PATH": f"{bin_dir}:/usr/bin:/bin", "GPU_HEALTH_CONF": str(conf), "GPU_HEALTH_NODE": "c000"},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    return done, calls.read_text() if calls.exists() else ""


REAL = (1, 3)  # opens: a GPU that a driver answers
STAND_IN = (195, 0)  # ENXIO here (no NVIDIA driver on the test hosts)
ONE_GPU = 'echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)"\n'


def test_real_gpus_without_nvidia_smi_drain_the_node(tmp_path):
    done, calls = run_health(tmp_path, *REAL)
    assert done.returncode == 1
    assert "nvidia-smi not found on PATH with real GPUs" in done.stderr
    assert calls.startswith("update NodeName=c000 State=DRAIN Reason=gpu-health: nvidia-smi not found on PATH")


def test_an_empty_placeholder_nvidia_smi_drains_the_node(tmp_path):
    done, calls = run_health(tmp_path, *REAL, smi="", smi_mode=0)
    assert done.returncode == 1
    assert (
        "nvidia-smi at " in done.stderr and "is not an executable program (an empty bind placeholder?)" in done.stderr
    )
    assert "State=DRAIN" in calls


def test_a_broken_nvidia_smi_drains_the_node(tmp_path):
    broken = 'echo "NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver."; exit 9\n'
    done, calls = run_health(tmp_path, *REAL, smi=broken)
    assert done.returncode == 1
    assert "nvidia-smi -L failed: NVIDIA-SMI has failed" in done.stderr
    assert "State=DRAIN" in calls


def test_real_gpus_with_a_working_nvidia_smi_pass(tmp_path):
    done, calls = run_health(tmp_path, *REAL, smi=ONE_GPU)
    assert done.returncode == 0, done.stderr
    assert calls == ""


def test_stand_ins_need_no_nvidia_smi(tmp_path):
    if Path("/proc/driver/nvidia").exists():
        pytest.skip("an NVIDIA driver answers major 195 on this host: no stand-in")
    done, calls = run_health(tmp_path, *STAND_IN)
    assert done.returncode == 0, done.stderr
    assert calls == ""
