"""A node without memory_mb gets its share of its host (components/composition/node_memory.py),
the host measured once (components/host/host_size.py, files/host_size_create.sh)."""

import copy
import os
import subprocess
from pathlib import Path

import pytest

from components.common.transport import INTERPRETER, script
from components.composition.config import ClusterConfig
from components.composition.node_memory import HOST_RESERVED_MB, shares, with_shares
from components.host.host_size import FILES, HostSize, parse_host_size
from components.slurm.config import NODE_DAEMON_MEMORY_MB
from components.slurm.slurm_conf import node_daemon_memory_mb
from tests.harness.program_harness import stack_config

MEASURE = script(FILES / "host_size_create.sh")
MB = 1024 * 1024


def mem_total_mb() -> int:
    meminfo = Path("/proc/meminfo").read_text().splitlines()
    return int(next(line.split()[1] for line in meminfo if line.startswith("MemTotal:"))) // 1024


def measure(lxc: Path) -> HostSize:
    environment = {"PATH": os.environ["PATH"], "NAT_BRIDGE": "hszbr0", "LXC_PATH": str(lxc)}
    done = subprocess.run([*INTERPRETER, MEASURE], env=environment, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return parse_host_size(done.stdout)


def container(lxc: Path, name: str, config: str, gpucluster_conf: str | None = None) -> None:
    (lxc / name).mkdir(parents=True)
    (lxc / name / "config").write_text(config)
    if gpucluster_conf is not None:
        (lxc / name / "gpucluster.conf").write_text(gpucluster_conf)


def test_the_host_is_measured_less_what_other_clusters_containers_hold(tmp_path):
    """MemTotal and the online CPUs, less the limits of containers not on this cluster's NAT
    bridge (another cluster's nodes), in either cgroup version's key; this cluster's own
    containers and unlimited ones take nothing."""
    lxc = tmp_path / "lxc"
    assert measure(lxc) == HostSize(mem_total_mb(), os.cpu_count())
    container(lxc, "other-c000", "lxc.net.0.link = otherbr0\n", f"lxc.cgroup.memory.limit_in_bytes = {3000 * MB}\n")
    container(lxc, "other-c001", f"lxc.net.0.link = otherbr0\nlxc.cgroup2.memory.max = {1000 * MB}\n")
    container(lxc, "hsz-c000", "lxc.net.0.link = hszbr0\n", f"lxc.cgroup2.memory.max = {5000 * MB}\n")
    container(lxc, "hsz-c001", "lxc.include = x\n", f"lxc.net.0.link = hszbr0\nlxc.cgroup2.memory.max = {5000 * MB}\n")
    container(lxc, "unlimited", "lxc.net.0.link = lxcbr0\n")
    assert measure(lxc) == HostSize(mem_total_mb() - 4000, os.cpu_count())


def test_a_measure_that_cannot_be_read_is_named():
    with pytest.raises(ValueError, match="the host's size could not be read from ''"):
        parse_host_size("")


def config(**changes) -> ClusterConfig:
    raw = copy.deepcopy(stack_config("e2e")["cluster"])
    raw.update(changes)
    for node in raw["nodes"]:
        node.pop("memory_mb", None)
    return ClusterConfig.model_validate(raw)


def limits(cluster: ClusterConfig, size: HostSize) -> dict[str, int]:
    """Each node container's limit (RealMemory and its daemons') on a host of `size`."""
    host = cluster.cluster_hosts[0]
    return {
        node.name: mb + node_daemon_memory_mb(cluster, node)
        for node, mb in zip(*_nodes(cluster, host, size), strict=True)
    }


def _nodes(cluster, host, size):
    figures = shares(cluster, host, size)
    nodes = [node for node in cluster.nodes if node.name in figures]
    return nodes, [figures[node.name] for node in nodes]


@pytest.mark.parametrize("memory_mb, cpus", [(65536, 16), (262144, 64), (24000, 2), (8192, 4)])
def test_the_shares_fit_the_host_and_follow_the_cpus(memory_mb, cpus):
    """Together the nodes' limits never pass the host's memory less its 1 GB (what the
    preflight checks); a node with twice the CPUs gets twice the share, and the controller's
    node (c000) the same per CPU, slurmctld's room kept beside it."""
    cluster = config()
    size = HostSize(memory_mb, cpus)
    given = limits(cluster, size)
    assert sum(given.values()) <= memory_mb - HOST_RESERVED_MB
    figures = shares(cluster, cluster.cluster_hosts[0], size)
    cpus_of = {node.name: node.cpus for node in cluster.nodes}
    per_cpu = {name: (mb + NODE_DAEMON_MEMORY_MB) // cpus_of[name] for name, mb in figures.items()}
    assert max(per_cpu.values()) - min(per_cpu.values()) <= 1, per_cpu
    assert given["c000"] - figures["c000"] == node_daemon_memory_mb(cluster, cluster.nodes[0]) == 768


def test_a_node_added_later_changes_no_others_share_while_the_host_has_cpus():
    cluster = config()
    size = HostSize(65536, 16)
    before = shares(cluster, cluster.cluster_hosts[0], size)
    raw = cluster.model_dump(exclude_none=True, mode="json")
    raw["nodes"].append(
        {**raw["nodes"][-1], "name": "c009", "gpus": 0, "nat_address": "10.43.3.60", "cluster_address": "10.43.5.60"}
    )
    after = shares(ClusterConfig.model_validate(raw), cluster.cluster_hosts[0], size)
    assert {name: after[name] for name in before} == before
    assert "c009" in after


def test_set_memory_and_the_login_node_come_off_the_share():
    """What the stack sets (a node's memory_mb, the login node's limit) is kept first; the
    other nodes share the rest by the CPUs left to them."""
    cluster = config()
    raw = cluster.model_dump(exclude_none=True, mode="json")
    raw["nodes"][0]["memory_mb"] = 8000
    set_one = ClusterConfig.model_validate(raw)
    size = HostSize(65536, 16)
    figures = shares(set_one, set_one.cluster_hosts[0], size)
    assert raw["nodes"][0]["name"] not in figures
    first = set_one.nodes[0]
    left = 65536 - HOST_RESERVED_MB - 8000 - node_daemon_memory_mb(set_one, first)
    cpus = 16 - first.cpus
    for node in set_one.nodes[1:]:
        assert figures[node.name] == left * node.cpus // cpus - NODE_DAEMON_MEMORY_MB
    resolved = with_shares(set_one, {set_one.cluster_hosts[0].name: size})
    assert [node.memory for node in resolved.nodes] == [8000, *(figures[n.name] for n in set_one.nodes[1:])]
