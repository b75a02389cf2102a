"""slurm.conf and gres.conf of a cluster with a burst partition: cloud nodes, power saving,
the programs, configless; accepted by Slurm 22.05's parser."""

import shutil
import subprocess

from components.composition.stack_config import parse_stack_config
from components.slurm.slurm_conf import render_gres_conf
from tests.burst.stack import burst_stack
from tests.harness.program_harness import slurm_conf_of


def rendered() -> tuple[str, str]:
    config = parse_stack_config(burst_stack()).cluster
    return slurm_conf_of(config, "c000"), render_gres_conf(config)


def settings(text: str) -> dict[str, str]:
    return dict(
        line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#") and " " not in line
    )


def test_cloud_nodes_with_their_gres_and_the_partition_timers():
    text, _ = rendered()
    assert "NodeName=burst-[1-4] CPUs=4 RealMemory=4096 Gres=gpu:1 Feature=cloud,burst Weight=100 State=CLOUD\n" in text
    assert "PartitionName=burst Nodes=burst-[1-4] MaxTime=INFINITE SuspendTime=300 ResumeTimeout=600 State=UP\n" in text


def test_power_saving_programs_and_cloud_parameters():
    conf = settings(rendered()[0])
    assert conf["SlurmctldParameters"] == "enable_configless,cloud_reg_addrs,idle_on_node_suspend"
    assert conf["ResumeProgram"] == "/opt/gpucluster-burst/gpu/bin/resume"
    assert conf["SuspendProgram"] == "/opt/gpucluster-burst/gpu/bin/suspend"
    assert conf["ResumeFailProgram"] == "/opt/gpucluster-burst/gpu/bin/resume-fail"
    assert conf["SuspendTime"] == "INFINITE" and conf["TreeWidth"] == "65533" and conf["PrivateData"] == "cloud"
    assert conf["ResumeRate"] == conf["SuspendRate"] == "0"
    assert "PowerDownOnIdle" not in rendered()[0]  # 23.02's, not 22.05's


def test_gres_conf_names_the_instances_own_gpus():
    _, gres = rendered()
    assert "NodeName=burst-[1-4] Name=gpu File=/dev/nvidia0\n" in gres


def test_without_burst_no_cloud_line():
    config = parse_stack_config({"cluster": burst_stack()["cluster"] | {"burst": None}}).cluster
    text = slurm_conf_of(config, "c000")
    assert "CLOUD" not in text and "ResumeProgram" not in text and "SlurmctldParameters=enable_configless\n" in text


def test_slurm_2205_accepts_the_burst_slurm_conf(tmp_path):
    assert shutil.which("scontrol"), "scontrol is missing: run `bash .ci/run` (installs slurm-client)"
    conf = tmp_path / "slurm.conf"
    conf.write_text(rendered()[0])
    done = subprocess.run(
        ["scontrol", "show", "hostnames", "burst-[1-4]"],
        env={"SLURM_CONF": str(conf), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0 and "error" not in done.stderr, done.stderr
    assert done.stdout.split() == ["burst-1", "burst-2", "burst-3", "burst-4"]
    # The check can fail: a partition key 22.05 lacks is refused.
    conf.write_text(rendered()[0].replace("SuspendTime=300", "PowerDownOnIdle=YES SuspendTime=300"))
    bad = subprocess.run(
        ["scontrol", "show", "hostnames", "burst-1"],
        env={"SLURM_CONF": str(conf), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode != 0 and "PowerDownOnIdle" in bad.stderr, bad.stderr
