"""SlurmNode: munge and slurmd in one node container, registered with the controller."""

from ipaddress import IPv4Address
from pathlib import Path

import pulumi

from components.config import ClusterIdentity, NodeConfig
from components.options import child_options
from components.transport import host_command

FILES = Path(__file__).parent / "files"


class SlurmNode(pulumi.ComponentResource):
    """slurmd in a node container, in configless mode.

    Builds `<name>-slurmd`: installs the cluster's munge key (munge:munge 0400) and starts
    munge, then starts slurmd with `--conf-server` pointing at the controller, and waits
    until the controller reports the node idle. The node holds no copy of slurm.conf, so
    adding or removing another node never touches this one.
    """

    node_name: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        cluster: ClusterIdentity,
        node: NodeConfig,
        controller_address: IPv4Address,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("gpu-cluster:slurm:SlurmNode", name, None, opts)
        self.slurmd = host_command(
            f"{name}-slurmd",
            create=FILES / "slurmd_create.sh",
            delete=FILES / "slurmd_delete.sh",
            environment={
                "CLUSTER": cluster.name,
                "CONTAINER": cluster.container_name(node.name),
                "NODE": node.name,
                "MUNGE_KEY_FILE": f"{cluster.cluster_dir}/munge.key",
                "MUNGE_SOCKET": cluster.munge_socket,
                "CONF_SERVER": str(controller_address),
                "SLURM_CONF_PATH": f"{cluster.cluster_dir}/slurm.conf",
            },
            opts=child_options(self, opts),
        )
        self.node_name = pulumi.Output.from_input(node.name)
        self.register_outputs({"node_name": self.node_name})
