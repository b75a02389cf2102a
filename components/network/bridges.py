"""Bridges: the NAT bridge (host <-> nodes, NAT out) and the cluster bridge (macvlan)."""

from pathlib import Path

import pulumi

from components.common.config_types import ClusterIdentity
from components.common.options import child_options
from components.common.transport import Transport, host_command
from components.network.config import NetworkConfig

FILES = Path(__file__).parent / "files"


class Bridges(pulumi.ComponentResource):
    """The cluster's two host bridges, as in the tutorial, named and addressed from config.

    Builds:
      - `<name>-nat`: bridge with the gateway address, ip_forward on, MASQUERADE for its
        subnet and FORWARD accepts, every rule tagged with the cluster's comment.
      - `<name>-cluster`: address-less bridge, lower device of the nodes' macvlan links.
    Each refuses new connections routed into it but for what is accepted before (forwards,
    other hosts' subnets) and, on the NAT bridge, `burst_access` (burst nodes to Slurm).
    Delete removes exactly these (and restores ip_forward if it was off).
    """

    nat_bridge: pulumi.Output[str]
    cluster_bridge: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        cluster: ClusterIdentity,
        network: NetworkConfig,
        opts: pulumi.ResourceOptions | None = None,
        transport: Transport | None = None,
        burst_access: str = "",
    ):
        super().__init__("gpu-cluster:network:Bridges", name, None, opts)
        # A renamed bridge is a new bridge: delete the old one first (same subnet), while
        # an address change converges in place when the create runs again.
        nat, bridge = network.nat_bridge, network.cluster_bridge
        common = {"CLUSTER": cluster.name, "CLUSTER_DIR": cluster.cluster_dir}
        self.nat = host_command(
            f"{name}-nat",
            transport=transport,
            create=FILES / "bridge_create.sh",
            delete=FILES / "bridge_delete.sh",
            triggers=[nat.name],
            environment={
                **common,
                "BRIDGE": nat.name,
                "ADDRESS": str(nat.address),
                "NAT_SUBNET": str(nat.subnet),
                # only with burst, so other stacks' inputs stay as they were
                **({"BURST_ACCESS": burst_access} if burst_access else {}),
            },
            opts=child_options(self, opts, delete_before_replace=True),
        )
        self.cluster = host_command(
            f"{name}-cluster",
            transport=transport,
            create=FILES / "bridge_create.sh",
            delete=FILES / "bridge_delete.sh",
            triggers=[bridge.name],
            environment={**common, "BRIDGE": bridge.name, "ADDRESS": "", "NAT_SUBNET": ""},
            opts=child_options(self, opts, delete_before_replace=True),
        )
        self.nat_bridge = pulumi.Output.from_input(nat.name)
        self.cluster_bridge = pulumi.Output.from_input(bridge.name)
        self.register_outputs({"nat_bridge": self.nat_bridge, "cluster_bridge": self.cluster_bridge})
