"""A node's part of jobs in container images: its `-containers` command (Enroot's site files,
the prolog, the registries' CAs and the site's account; Enroot and Pyxis themselves where the
node's image predates them)."""

from dataclasses import dataclass

import pulumi

from components.common.config_types import ClusterIdentity
from components.common.transport import Transport, host_command
from components.containers.node_files import FILES


@dataclass(frozen=True)
class NodeContainers:
    """A node's setup's parameters and the site's registry accounts (secret; node_files.py)."""

    environment: dict[str, pulumi.Input[str]]
    credentials: pulumi.Output[str] | None = None


def node_containers_setup(
    name: str,
    cluster: ClusterIdentity,
    node_name: str,
    container: pulumi.Resource,
    setup: NodeContainers,
    parent: pulumi.Resource,
    old_parent: pulumi.Input[str],
    transport: Transport | None = None,
) -> pulumi.Resource:
    """`<name>`: the node's setup, on its container only, so that slurmctld (which names the
    prolog and serves plugstack.conf's `required` Pyxis) and the node's slurmd (which loads
    Pyxis at start) both come after it: a node of an older image has Pyxis and the prolog
    before any Slurm daemon looks for them. Set up again in a new clone of the node.
    `old_parent`: the URN of the node's SlurmNode, its parent until it came before slurmctld."""
    return host_command(
        name,
        transport=transport,
        create=FILES / "containers_create.sh",
        delete=FILES / "containers_delete.sh",
        environment={"CLUSTER": cluster.name, "CONTAINER": cluster.container_name(node_name), **setup.environment},
        stdin=setup.credentials,
        opts=pulumi.ResourceOptions(
            parent=parent,
            depends_on=[container],
            replace_with=[container],
            aliases=[pulumi.Alias(parent=old_parent)],
        ),
    )
