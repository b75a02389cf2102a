"""Typed config of the host's networking: the two bridges and host port forwards."""

from ipaddress import IPv4Interface, IPv4Network
from typing import Annotated

from pydantic import AfterValidator, Field

from components.common.config_types import Hostname, Interface, InterfaceName, Network, Port, StrictModel

# Where a bridge's subnet may lie: the private ranges of RFC 1918 and the shared address space
# of RFC 6598 (100.64.0.0/10). Anything else is someone's: a public network the nodes could no
# longer reach, or loopback, link-local, multicast or reserved space the kernel treats apart.
PRIVATE_NETWORKS = tuple(IPv4Network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10"))

# Interface names a bridge may not take: `all` and `default` are the kernel's per-interface
# sysctl directories (net.ipv4.conf.all, .default), `lo` the loopback, `bonding_masters` a file
# in /sys/class/net, and lxcbr0, virbr0, docker0 the bridges LXC, libvirt and Docker make.
RESERVED_INTERFACE_NAMES = frozenset({"all", "default", "lo", "bonding_masters", "lxcbr0", "virbr0", "docker0"})


def _check_bridge_name(name: str) -> str:
    if name in RESERVED_INTERFACE_NAMES:
        raise ValueError(
            f"{name!r} is a name the kernel or another program reserves "
            f"({', '.join(sorted(RESERVED_INTERFACE_NAMES))}); pick another"
        )
    return name


def _check_private(subnet: IPv4Network) -> None:
    if not any(subnet.subnet_of(private) for private in PRIVATE_NETWORKS):
        raise ValueError(
            f"{subnet} is not a private network; use one inside "
            f"{', '.join(map(str, PRIVATE_NETWORKS))} (RFC 1918, RFC 6598)"
        )


def _private_interface(address: IPv4Interface) -> IPv4Interface:
    _check_private(address.network)
    return address


def _private_network(subnet: IPv4Network) -> IPv4Network:
    _check_private(subnet)
    return subnet


BridgeName = Annotated[InterfaceName, AfterValidator(_check_bridge_name)]


class NatBridgeConfig(StrictModel):
    """Bridge with an address on the host: veth links, NAT to the outside, host <-> nodes."""

    name: BridgeName = Field(description="bridge interface name")
    address: Annotated[Interface, AfterValidator(_private_interface)] = Field(
        description="the bridge's address with prefix (gateway of the nodes), e.g. 10.10.3.1/24"
    )

    @property
    def subnet(self) -> IPv4Network:
        return self.address.network


class ClusterBridgeConfig(StrictModel):
    """Bridge without a host address: lower device of the nodes' macvlan links."""

    name: BridgeName = Field(description="bridge interface name")
    subnet: Annotated[Network, AfterValidator(_private_network)] = Field(
        description="subnet of the nodes' macvlan addresses"
    )


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
    allowed_sources: list[Network] = Field([], max_length=32, description=SOURCES_DESCRIPTION)

    @property
    def source_list(self) -> str:
        """Allowed source networks as the scripts take them: '+'-separated, empty for any."""
        return "+".join(str(network) for network in self.allowed_sources)
