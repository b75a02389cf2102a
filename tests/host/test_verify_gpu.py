"""`./verify.sh STACK --gpu` (ops/verify_gpu.py) without a cluster: its probe run
here as a job would run it, srun a stub that runs the job's command on this host. Stand-ins
say "stand-ins: skipped", never pass the nvidia-smi and CUDA parts; a node whose GPUs a driver
answers (here a character device with /dev/null's numbers) fails precisely without nvidia-smi
or libcuda.so.1. The real thing through Slurm is in tests/test_e2e.py (stand-ins)."""

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from components.composition.config import ClusterConfig
from ops.verify import main
from ops.verify_gpu import PROBE, node_gpus, slurm_client, verify_gpus
from tests.harness.program_harness import stack_config

pytestmark = pytest.mark.privileged  # mknod


def probe(tmp_path: Path, gpus: list[str], others=(), gres: int | None = None, path: str = "") -> list[str]:
    spec = {"gpus": gpus, "others": list(others), "gres": len(gpus) if gres is None else gres}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(spec)],
        env={"PATH": f"{path}/usr/bin:/bin", "LD_LIBRARY_PATH": str(tmp_path)},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def device(tmp_path: Path, name: str, major: int, minor: int) -> str:
    path = tmp_path / name
    os.mknod(path, 0o20666, os.makedev(major, minor))
    return str(path)


def test_stand_ins_are_skipped_not_passed(tmp_path):
    if Path("/proc/driver/nvidia").exists():
        pytest.skip("an NVIDIA driver answers major 195 here: no stand-in")
    lines = probe(tmp_path, [device(tmp_path, "nvidia0", 195, 0)])
    assert lines == [
        f"ok {tmp_path}/nvidia0 (allocated) opens as far as a stand-in goes (ENXIO: no driver behind it)",
        "skipped stand-ins: skipped nvidia-smi -L and the CUDA computation (stand-in GPUs, no driver behind them)",
    ]


def test_a_real_gpu_without_the_drivers_files_fails_precisely(tmp_path):
    lines = probe(tmp_path, [device(tmp_path, "nvidia0", 1, 3)])
    assert lines[0] == f"ok {tmp_path}/nvidia0 (allocated) opens"
    assert lines[1].startswith("FAIL nvidia-smi is not on PATH in the node: the driver's files are not bound")
    assert lines[2].startswith("FAIL CUDA: libcuda.so.1 cannot be loaded in the node (")


def test_nvidia_smi_must_list_the_gres(tmp_path):
    bin_dir = tmp_path / "usr/bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "nvidia-smi").write_text('#!/bin/sh\necho "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)"\n')
    (bin_dir / "nvidia-smi").chmod(0o755)
    lines = probe(tmp_path, [device(tmp_path, "nvidia0", 1, 3)], gres=1, path=str(tmp_path))
    assert "ok nvidia-smi -L lists 1 GPUs = GRES gpu:1" in lines
    lines = probe(tmp_path / "..", [str(tmp_path / "nvidia0")], gres=2, path=str(tmp_path))
    assert "FAIL nvidia-smi -L lists 1 GPUs, the node's GRES is gpu:2" in lines


def test_another_gpu_that_opens_is_a_failure(tmp_path):
    """Outside a node nothing refuses another GPU's number: the probe must say FAIL."""
    lines = probe(tmp_path, [device(tmp_path, "nvidia0", 1, 3)], others=[(1, 5)])
    assert "FAIL another GPU of the host (1:5, not this node's) opens in the node" in lines


def test_verify_gpu_runs_one_job_per_node_through_srun(tmp_path, monkeypatch):
    """The e2e stack's nodes (stand-ins), srun a stub that logs its options and runs the job here."""
    if Path("/proc/driver/nvidia").exists():
        pytest.skip("an NVIDIA driver answers major 195 here: no stand-in")
    cluster = ClusterConfig.model_validate(stack_config("e2e")["cluster"])
    nodes = node_gpus(cluster)
    assert [n.name for n in nodes] == [n.name for n in cluster.nodes]
    # The stand-ins, made here where the config puts them (the cluster's private device directory
    # is not there: the job sees them at /dev/<name> in a node; here a stub maps them).
    stand_in = device(tmp_path, "nvidia0", 195, 0)
    # The srun it runs is the host's Slurm client (the cluster directory's bin/: the node image's).
    assert slurm_client(cluster, cluster.cluster_hosts[0]) == f"/var/lib/gpucluster/{cluster.name}/bin"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setattr("ops.verify_gpu.slurm_client", lambda cluster, host: str(bin_dir))
    log = tmp_path / "srun.log"
    (bin_dir / "srun").write_text(
        "#!/bin/bash\n"
        f'echo "$0 ${{*:1:7}}" >> {log}\n'
        'while [ "$1" != python3 ]; do shift; done\n'
        f'spec=$(sed "s#/dev/nvidia[0-9]*#{stand_in}#g" <<< "$4")\n'
        'exec python3 "$2" "$3" "$spec"\n'
    )
    (bin_dir / "srun").chmod(0o755)
    # The other nodes' stand-ins exist only while an e2e cluster is up (and here, outside a
    # node, nothing would refuse them): the probe tests above check the others.
    monkeypatch.setattr("ops.verify_gpu._numbers", lambda path: None)
    out = io.StringIO()
    assert verify_gpus(cluster, out=out) == 0
    report = out.getvalue().splitlines()
    assert "c000: skipped  stand-ins: skipped nvidia-smi -L and the CUDA computation" in "\n".join(report)
    assert (
        report[-1]
        == f"device checks (stand-ins: nvidia-smi and CUDA skipped) passed on {len(nodes)} of {len(nodes)} nodes"
    )
    calls = log.read_text().splitlines()
    assert calls[0].startswith(f"{bin_dir}/srun --quiet --nodelist=c000 --nodes=1")
    assert "--gres=gpu:1" in calls[0]


def test_usage_names_the_flag(capsys):
    assert main(["e2e", "--bogus"]) == 2
    assert "--gpu" in capsys.readouterr().err
