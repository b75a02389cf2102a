"""PortForward: a host port DNATed to a port of a container, from outside and from the host."""

from ipaddress import IPv4Address
from pathlib import Path

import pulumi

from components.common.config_types import ClusterIdentity
from components.common.options import child_options
from components.common.transport import Transport, host_command
from components.network.config import PortForwardConfig

FILES = Path(__file__).parent / "files"


class PortForward(pulumi.ComponentResource):
    """iptables rules forwarding `host_port` to `address:port`.

    Builds `<name>-rules`: DNAT in PREROUTING (traffic from outside, from `allowed_sources`
    only when given) and in OUTPUT for the host's own addresses (traffic from the host
    itself), plus a FORWARD accept of exactly the forwarded port to the target; inserted at
    the top of their chains. The create then checks the forward end to end (no rule above
    ours takes its traffic: the chain is named; a connection through the host port reaches
    the target). Every rule carries the comment `gpucluster:<cluster>:fwd:<host_port>`, and
    delete removes exactly the rules carrying it.
    """

    host_port: pulumi.Output[int]
    target: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        cluster: ClusterIdentity,
        forward: PortForwardConfig,
        address: IPv4Address,
        opts: pulumi.ResourceOptions | None = None,
        transport: Transport | None = None,
    ):
        super().__init__("gpu-cluster:network:PortForward", name, None, opts)
        self.rules = host_command(
            f"{name}-rules",
            transport=transport,
            create=FILES / "forward_create.sh",
            delete=FILES / "forward_delete.sh",
            environment={
                "TAG": cluster.forward_tag(forward.host_port),
                "HOST_PORT": str(forward.host_port),
                "TARGET_ADDRESS": str(address),
                "TARGET_PORT": str(forward.port),
                "SOURCES": forward.source_list,
            },
            # A different host port is a different rule set: the tag changes with it.
            triggers=[forward.host_port],
            placed=True,
            opts=child_options(self, opts, delete_before_replace=True),
        )
        self.host_port = pulumi.Output.from_input(forward.host_port)
        self.target = pulumi.Output.from_input(f"{address}:{forward.port}")
        self.register_outputs({"host_port": self.host_port, "target": self.target})
