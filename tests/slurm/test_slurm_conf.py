"""Rendered slurm.conf and gres.conf: exact lines, and accepted by Slurm 22.05.

The acceptance check parses the text with the real tool (installed by .ci/run): every Slurm
command parses slurm.conf and aborts on a key 22.05 removed.
"""

import copy
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from components.config import ClusterConfig
from components.slurm.slurm_conf import format_line, render_gres_conf, render_slurm_conf
from tests.harness.program_harness import stack_config


def cluster(stack: str = "e2e", **changes) -> ClusterConfig:
    raw = copy.deepcopy(stack_config(stack)["cluster"])
    raw.update(changes)
    return ClusterConfig.model_validate(raw)


def lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line and not line.startswith("#")]


@pytest.mark.parametrize(
    ("pairs", "expected"),
    [
        ({"A": 1, "B": None, "C": "x"}, "A=1 C=x"),
        ({"Default": True, "Hidden": False}, "Default=YES Hidden=NO"),
    ],
)
def test_format_line(pairs, expected):
    assert format_line(pairs) == expected


def test_slurm_conf_node_and_partition_lines():
    text = render_slurm_conf(cluster(), "c000")
    assert text.startswith("# Managed by the gpu-cluster Pulumi program")
    body = lines(text)
    assert "GresTypes=gpu" in body
    assert "SelectType=select/cons_tres" in body
    assert "SlurmctldHost=c000(10.43.3.2)" in body
    assert "SlurmctldParameters=enable_configless" in body
    assert "AuthInfo=socket=/run/gpucluster-e2e/munge.socket" in body
    assert [line for line in body if line.startswith("NodeName=")] == [
        f"NodeName=c00{i} NodeAddr=10.43.3.{i + 2} CPUs=2 Gres=gpu:1 State=UNKNOWN" for i in range(4)
    ]
    assert [line for line in body if line.startswith("PartitionName=")] == [
        "PartitionName=tutorial Nodes=c[000-003] Default=YES MaxTime=INFINITE OverSubscribe=YES State=UP"
    ]


def test_slurm_conf_has_none_of_the_tutorials_removed_keys():
    text = render_slurm_conf(cluster(), "c000")
    for removed in ("ControlMachine", "CacheGroups", "SchedulerPort", "FastSchedule", "Shared=", "filetxt"):
        assert removed not in text


def test_node_without_gpus_has_no_gres():
    config = cluster()
    raw = config.model_dump(mode="json")
    raw["nodes"][3]["gpus"] = 0
    config = ClusterConfig.model_validate(raw)
    assert "NodeName=c003 NodeAddr=10.43.3.5 CPUs=2 State=UNKNOWN" in render_slurm_conf(config, "c000")
    assert "c003" not in render_gres_conf(config)


def test_gres_conf_matches_the_node_lines():
    config = cluster()
    gres = lines(render_gres_conf(config))
    assert gres == [f"NodeName=c00{i} Name=gpu File=/dev/nvidia{i}" for i in range(4)]
    slurm = render_slurm_conf(config, "c000")
    for node in config.nodes:
        files = [line for line in gres if line.startswith(f"NodeName={node.name} ")]
        assert f"NodeName={node.name} " in slurm
        assert re.search(rf"NodeName={node.name} .*Gres=gpu:{len(files)} ", slurm)


def test_shared_gpu_appears_on_every_node():
    gres = lines(render_gres_conf(cluster("local")))
    assert gres == [f"NodeName=c00{i} Name=gpu File=/dev/nvidia0" for i in range(4)]


def test_controller_on_the_host_keeps_its_state_in_the_cluster_dir():
    raw = stack_config("e2e")["cluster"]
    raw["slurm"]["controller"] = {"placement": "host"}
    text = render_slurm_conf(ClusterConfig.model_validate(raw), "gpuhost")
    assert "SlurmctldHost=gpuhost(10.43.3.1)" in text
    assert "StateSaveLocation=/var/lib/gpucluster/e2e/slurmctld" in text


def slurm_parses(text: str, tmp_path: Path) -> subprocess.CompletedProcess:
    assert shutil.which("scontrol"), "scontrol is missing: run `bash .ci/run` (installs slurm-client)"
    conf = tmp_path / "slurm.conf"
    conf.write_text(text)
    return subprocess.run(
        ["scontrol", "show", "hostnames", "c[000-001]"],
        env={"SLURM_CONF": str(conf), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.parametrize("stack", ["e2e", "local"])
def test_slurm_2205_accepts_the_rendered_slurm_conf(stack, tmp_path):
    done = slurm_parses(render_slurm_conf(cluster(stack), "c000"), tmp_path)
    assert done.returncode == 0 and "error" not in done.stderr, done.stderr


def test_slurm_2205_rejects_a_removed_key(tmp_path):
    # The check above can fail: the tutorial's CacheGroups aborts parsing on 22.05.
    done = slurm_parses(render_slurm_conf(cluster(), "c000") + "CacheGroups=0\n", tmp_path)
    assert done.returncode != 0 and "CacheGroups" in done.stderr
