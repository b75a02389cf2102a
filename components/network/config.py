"""Typed config of the host's networking: the two bridges and host port forwards."""

from ipaddress import IPv4Interface, IPv4Network

from pydantic import Field

from components.config_types import Hostname, InterfaceName, Port, StrictModel


class NatBridgeConfig(StrictModel):
    """Bridge with an address on the host: veth links, NAT to the outside, host <-> nodes."""

    name: InterfaceName = Field(description="bridge interface name")
    address: IPv4Interface = Field(
        description="the bridge's address with prefix (gateway of the nodes), e.g. 10.10.3.1/24"
    )

    @property
    def subnet(self) -> IPv4Network:
        return self.address.network


class ClusterBridgeConfig(StrictModel):
    """Bridge without a host address: lower device of the nodes' macvlan links."""

    name: InterfaceName = Field(description="bridge interface name")
    subnet: IPv4Network = Field(description="subnet of the nodes' macvlan addresses")


class NetworkConfig(StrictModel):
    nat_bridge: NatBridgeConfig
    cluster_bridge: ClusterBridgeConfig


SOURCES_DESCRIPTION = (
    "source networks (CIDR) allowed to connect through the host port; empty: any. The host "
    "itself always reaches the forward"
)


class PortForwardConfig(StrictModel):
    """A host port DNATed to a port of a container."""

    host_port: Port = Field(description="port on the host")
    target: Hostname = Field(description="node name, or the web app's container name")
    port: Port = Field(description="port in the target container")
    allowed_sources: list[IPv4Network] = Field([], max_length=32, description=SOURCES_DESCRIPTION)

    @property
    def source_list(self) -> str:
        """Allowed source networks as the scripts take them: '+'-separated, empty for any."""
        return "+".join(str(network) for network in self.allowed_sources)
