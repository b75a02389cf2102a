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

from components.composition.config import ClusterConfig
from components.slurm.slurm_conf import (
    format_line,
    render_cgroup_conf,
    render_gres_conf,
    slurmd_start_plugins,
)
from tests.harness.program_harness import slurm_conf_of, stack_config


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
    text = slurm_conf_of(cluster(), "c000")
    assert text.startswith("# Managed by the gpu-cluster Pulumi program")
    body = lines(text)
    assert "GresTypes=gpu,shard" in body
    assert "SelectType=select/cons_tres" in body
    assert "SlurmctldHost=c000(10.43.3.2)" in body
    assert "SlurmctldParameters=enable_configless" in body
    assert "AuthInfo=socket=/run/gpucluster-e2e/munge.socket" in body
    # No memory_mb: each node's share of the measured host (16 GiB less 1 GB and slurmctld's 512 MB,
    # 16 CPUs: 1856 MB per 2 CPUs), less its daemons' 256 MB.
    assert [line for line in body if line.startswith("NodeName=")] == [
        f"NodeName=c00{i} NodeAddr=10.43.3.{i + 2} CPUs=2 RealMemory={memory} Gres=gpu:1 State=UNKNOWN"
        for i, memory in enumerate([1600] * 4)
    ]
    assert [line for line in body if line.startswith("PartitionName=")] == [
        "PartitionName=tutorial Nodes=c[000-003] Default=YES MaxTime=INFINITE OverSubscribe=YES State=UP"
    ]


def test_slurm_conf_has_none_of_the_tutorials_removed_keys():
    text = slurm_conf_of(cluster(), "c000")
    for removed in ("ControlMachine", "CacheGroups", "SchedulerPort", "FastSchedule", "Shared=", "filetxt"):
        assert removed not in text


def test_node_without_gpus_has_no_gres():
    config = cluster()
    raw = config.model_dump(mode="json")
    raw["nodes"][3]["gpus"] = 0
    config = ClusterConfig.model_validate(raw)
    assert "NodeName=c003 NodeAddr=10.43.3.5 CPUs=2 RealMemory=1600 State=UNKNOWN" in slurm_conf_of(config, "c000")
    assert "c003" not in render_gres_conf(config)


def test_gres_conf_matches_the_node_lines():
    config = cluster()
    gres = lines(render_gres_conf(config))
    assert gres == [f"NodeName=c00{i} Name=gpu File=/dev/nvidia{i}" for i in range(4)]
    slurm = slurm_conf_of(config, "c000")
    for node in config.nodes:
        files = [line for line in gres if line.startswith(f"NodeName={node.name} ")]
        assert f"NodeName={node.name} " in slurm
        assert re.search(rf"NodeName={node.name} .*Gres=gpu:{len(files)} ", slurm)


def test_a_shared_gpu_is_shards_on_the_node_that_owns_it():
    # The tutorial's GPU: c000 owns it whole (gpu:1) and as four shards; no other node claims it.
    config = cluster("local")
    assert lines(render_gres_conf(config)) == [
        "NodeName=c000 Name=gpu File=/dev/nvidia0",
        "NodeName=c000 Name=shard Count=4 File=/dev/nvidia0",
    ]
    body = lines(slurm_conf_of(config, "c000"))
    assert "GresTypes=gpu,shard" in body
    nodes = [line for line in body if line.startswith("NodeName=")]
    assert nodes[0] == "NodeName=c000 NodeAddr=10.42.3.2 CPUs=4 RealMemory=3456 Gres=gpu:1,shard:4 State=UNKNOWN"
    assert all("Gres=" not in line for line in nodes[1:])


def test_shards_are_counted_per_gpu():
    raw = copy.deepcopy(stack_config("e2e")["cluster"])
    raw["gpu"]["stand_in"]["count"] = 6
    raw["nodes"][3] |= {"gpus": 2, "gpu_shards": 3}
    config = ClusterConfig.model_validate(raw)
    assert "NodeName=c003 NodeAddr=10.43.3.5 CPUs=2 RealMemory=1600 Gres=gpu:2,shard:6 State=UNKNOWN" in (
        slurm_conf_of(config, "c000")
    )
    shards = [line for line in lines(render_gres_conf(config)) if "Name=shard" in line]
    assert shards == [
        "NodeName=c003 Name=shard Count=3 File=/dev/nvidia3",
        "NodeName=c003 Name=shard Count=3 File=/dev/nvidia5",
    ]


def test_jobs_are_contained_and_memory_is_scheduled():
    raw = copy.deepcopy(stack_config("e2e")["cluster"])
    raw["nodes"][0]["memory_mb"] = 1000  # 500 per CPU: the smallest share is every job's default
    body = lines(slurm_conf_of(ClusterConfig.model_validate(raw), "c000"))
    for setting in (
        "ProctrackType=proctrack/cgroup",
        "TaskPlugin=task/cgroup,task/affinity",
        "SelectTypeParameters=CR_Core_Memory",
        "DefMemPerCPU=500",
    ):
        assert setting in body
    assert lines(render_cgroup_conf()) == [
        "CgroupPlugin=autodetect",
        "ConstrainCores=yes",
        "ConstrainDevices=yes",
        "ConstrainRAMSpace=yes",
        "AllowedRAMSpace=100",
        "ConstrainSwapSpace=yes",
        "AllowedSwapSpace=0",
    ]


def test_slurmd_restarts_for_the_plugins_it_loads_at_start_only():
    text = slurm_conf_of(cluster(), "c000")
    assert slurmd_start_plugins(text) == (
        "ProctrackType=proctrack/cgroup TaskPlugin=task/cgroup,task/affinity JobAcctGatherType=jobacct_gather/none "
        "GresTypes=gpu,shard"
    )


def test_controller_on_the_host_runs_in_its_own_container_with_debians_paths():
    raw = stack_config("e2e")["cluster"]
    raw["slurm"]["controller"] = {"placement": "host", "nat_address": "10.43.3.200"}
    text = slurm_conf_of(ClusterConfig.model_validate(raw), "slurmctld")
    assert "SlurmctldHost=slurmctld(10.43.3.200)" in text
    assert "StateSaveLocation=/var/lib/slurm/slurmctld" in text


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
    done = slurm_parses(slurm_conf_of(cluster(stack), "c000"), tmp_path)
    assert done.returncode == 0 and "error" not in done.stderr, done.stderr


def test_slurm_2205_rejects_a_removed_key(tmp_path):
    # The check above can fail: the tutorial's CacheGroups aborts parsing on 22.05.
    done = slurm_parses(slurm_conf_of(cluster(), "c000") + "CacheGroups=0\n", tmp_path)
    assert done.returncode != 0 and "CacheGroups" in done.stderr


def trixie(stack: str = "e2e", **changes) -> ClusterConfig:
    raw = copy.deepcopy(stack_config(stack)["cluster"])
    raw["image"] = {"release": "trixie"}
    raw.update(changes)
    return ClusterConfig.model_validate(raw)


def test_the_release_sets_the_slurm_version():
    assert cluster().image.slurm_version == (22, 5)
    assert trixie().image.slurm_version == (24, 11)


def test_slurm_2411_gets_no_setting_it_lacks():
    # 24.11 has no */none plugins and made cloud_reg_addrs and NoAddrCache defunct (its
    # slurmctld says so: tests/slurm/test_slurm_releases.py); 22.05 keeps its rendering.
    old, new = lines(slurm_conf_of(cluster(), "c000")), lines(slurm_conf_of(trixie(), "c000"))
    dropped = [
        "MpiDefault=none",
        "SwitchType=switch/none",
        "JobAcctGatherType=jobacct_gather/none",
        "JobCompType=jobcomp/none",
        "AccountingStorageType=accounting_storage/none",
    ]
    # 24.11's Debian unit runs slurmctld as slurm: its pid goes to the unit's RuntimeDirectory.
    moved = {"SlurmctldPidFile=/run/slurmctld.pid": "SlurmctldPidFile=/run/slurmctld/slurmctld.pid"}
    assert set(old) - set(new) == set(dropped) | set(moved)
    assert set(new) - set(old) == set(moved.values())
    assert slurmd_start_plugins(slurm_conf_of(trixie(), "c000")) == (
        "ProctrackType=proctrack/cgroup TaskPlugin=task/cgroup,task/affinity GresTypes=gpu,shard"
    )


def test_slurmdbd_writes_its_pid_where_its_release_lets_it():
    from components.slurm.slurm_conf import render_slurmdbd_conf

    accounting = {"nat_address": "10.43.3.20"}
    old = render_slurmdbd_conf(cluster(accounting=accounting))
    new = render_slurmdbd_conf(trixie(accounting=accounting))
    assert "PidFile=/run/slurmdbd.pid\n" in old and "PidFile=/run/slurmdbd/slurmdbd.pid\n" in new


def test_slurm_2411_burst_settings_lack_the_defunct_cloud_options():
    from components.composition.stack_config import parse_stack_config
    from tests.burst.stack import burst_stack

    raw = burst_stack()
    raw["cluster"]["image"] = {"release": "trixie"}
    body = lines(slurm_conf_of(parse_stack_config(raw).cluster, "c000"))
    assert "SlurmctldParameters=enable_configless,idle_on_node_suspend" in body
    assert not [line for line in body if line.startswith(("CommunicationParameters=", "PrivateData="))]


def test_slurm_2411_accounting_keeps_its_gather():
    raw = copy.deepcopy(stack_config("e2e")["cluster"])
    raw["image"] = {"release": "trixie"}
    raw["accounting"] = {"name": "db", "nat_address": "10.43.3.20"}
    body = lines(slurm_conf_of(ClusterConfig.model_validate(raw), "c000"))
    assert "JobAcctGatherType=jobacct_gather/linux" in body
    assert "AccountingStorageType=accounting_storage/slurmdbd" in body
