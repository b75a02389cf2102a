"""The memory of the nodes that set no memory_mb: their host's share, by their CPUs.

Decided from the host's size, measured once (components/host/host_size.py), so the figure does
not move with the next upgrade or the machine the preview runs on. The share is of what the
host keeps for its nodes: its memory less HOST_RESERVED_MB for itself (what the preflight
keeps too), the login node's limit where it runs there, the limits of the nodes that set
memory_mb and slurmctld's room on its node; it is dealt by CPUs among the host's CPUs those
nodes leave (or the CPUs of the nodes that share them, where there are more of those), so a node
added later changes no other node's figure while the host has CPUs for it, and every such node
gets the same memory per CPU. A node's RealMemory is its share less what its own daemons keep;
its container's limit is its RealMemory and those daemons' (slurm_conf.node_daemon_memory_mb).
"""

from collections.abc import Callable, Mapping

import pulumi

from components.composition.cluster_host import ClusterHostConfig
from components.composition.config import ClusterConfig
from components.host.host_size import HostSize
from components.slurm.config import NODE_DAEMON_MEMORY_MB
from components.slurm.slurm_conf import node_daemon_memory_mb

# What the host keeps for itself (the preflight refuses nodes past its memory less this).
HOST_RESERVED_MB = 1024
# The least a node's jobs get (nodes[].memory_mb's own minimum).
LEAST_NODE_MEMORY_MB = 64


def shares(config: ClusterConfig, host: ClusterHostConfig, size: HostSize) -> dict[str, int]:
    """RealMemory (MB) of each of the host's nodes that sets no memory_mb, on a host of `size`."""
    view = config.for_host(host)
    given = [node for node in view.nodes if node.memory_mb is not None]
    defaulted = [node for node in view.nodes if node.memory_mb is None]
    kept = sum(node.memory_mb + node_daemon_memory_mb(config, node) for node in given)
    kept += view.login.memory_mb if view.login else 0
    # slurmctld's room (and the burst programs') on its node, kept before the share: what
    # comes to a node by its CPUs is the same per CPU on every node.
    kept += sum(node_daemon_memory_mb(config, node) - NODE_DAEMON_MEMORY_MB for node in defaulted)
    available = size.memory_mb - HOST_RESERVED_MB - kept
    cpus = max(size.cpus - sum(node.cpus for node in given), sum(node.cpus for node in defaulted), 1)
    return {
        node.name: max(LEAST_NODE_MEMORY_MB, available * node.cpus // cpus - NODE_DAEMON_MEMORY_MB)
        for node in defaulted
    }


def resolved(config: ClusterConfig, memory: Mapping[str, pulumi.Input[int]]):
    """`config` with every node's memory_mb known: a ClusterConfig where no node needs its
    host's size (nothing waits), else an Output of one."""
    missing = [node.name for node in config.nodes if node.memory_mb is None]
    if not missing:
        return config
    return pulumi.Output.all(*(memory[name] for name in missing)).apply(
        lambda figures: config.with_node_memory(dict(zip(missing, figures, strict=True)))
    )


def rendered(value, render: Callable):
    """`render(value)`, in an apply where `value` is an Output (a text of a resolved config)."""
    return value.apply(render) if isinstance(value, pulumi.Output) else render(value)


def with_shares(config: ClusterConfig, sizes: Mapping[str, HostSize]) -> ClusterConfig:
    """`config` with each node that sets no memory_mb given its share of its host, the hosts
    measured as `sizes` (by host name): what the program's apply resolves, known at once."""
    memory: dict[str, int] = {}
    for host in config.cluster_hosts:
        memory |= shares(config, host, sizes[host.name])
    return config.with_node_memory(memory)
