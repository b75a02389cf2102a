"""The cluster's rules on bridges, addresses and forwards (registered in components/composition/config.py).

Each rule takes the composed cluster and yields messages naming the field and what it accepts.
"""

from collections.abc import Iterator
from ipaddress import IPv4Address, IPv4Network

from components.common.config_types import duplicates

# Host ports a forward may not take: a DNAT rule on them would hijack the host's SSH, DNS,
# or Slurm traffic (slurmctld 6817, slurmd 6818, slurmdbd 6819; a host controller listens on
# the NAT bridge). Every port below 1024 is the host's, so forwards use 1024 and up.
FIRST_FORWARD_PORT = 1024
SLURM_PORTS = frozenset({6817, 6818, 6819})


def host_subnets(host) -> list[tuple[str, IPv4Network]]:
    return [
        ("network.nat_bridge.address", host.network.nat_bridge.subnet),
        ("network.cluster_bridge.subnet", host.network.cluster_bridge.subnet),
    ]


def rule_bridges_distinct(c) -> Iterator[str]:
    for prefix, host, _ in c.each_host():
        nat, cluster = host.network.nat_bridge, host.network.cluster_bridge
        if nat.name == cluster.name:
            yield f"{prefix}network.cluster_bridge.name: {cluster.name!r} is also the nat_bridge name; use two bridges"
        if nat.subnet.overlaps(cluster.subnet):
            yield (
                f"{prefix}network.cluster_bridge.subnet: {cluster.subnet} overlaps the nat_bridge subnet "
                f"{nat.subnet}; use disjoint subnets"
            )
        if nat.address.ip in (nat.subnet.network_address, nat.subnet.broadcast_address):
            yield (
                f"{prefix}network.nat_bridge.address: {nat.address} is the network or broadcast address of {nat.subnet}"
            )


def _usable(address: IPv4Address, subnet: IPv4Network) -> bool:
    return address in subnet and address not in (subnet.network_address, subnet.broadcast_address)


def _nat_addresses(c) -> list[tuple[str, IPv4Address, object]]:
    pairs = [(f"nodes[{i}].nat_address", n.nat_address, c.node_host(n)) for i, n in enumerate(c.nodes)]
    if c.web_app:
        pairs.append(("web_app.nat_address", c.web_app.nat_address, c.node_host(c.web_app)))
    if c.login:
        pairs.append(("login.nat_address", c.login.nat_address, c.node_host(c.login)))
    if c.accounting:
        pairs.append(("accounting.nat_address", c.accounting.nat_address, c.accounting_host))
    if c.metrics_enabled:
        pairs.append(("metrics.nat_address", c.metrics.nat_address, c.controller_host))
    if c.stack_registry:
        pairs.append(("containers.registry.nat_address", c.stack_registry.nat_address, c.controller_host))
    if c.slurm.controller.placement == "host":
        pairs.append(("slurm.controller.nat_address", c.controller_address, c.controller_host))
    return pairs


def rule_nat_addresses_in_subnet(c) -> Iterator[str]:
    for field, address, host in _nat_addresses(c):
        bridge = host.network.nat_bridge
        where = f" of host {host.name!r}" if c.multi_host else ""
        if not _usable(address, bridge.subnet):
            yield f"{field}: {address} is not a usable address of the NAT bridge subnet {bridge.subnet}{where}"
        elif address == bridge.address.ip:
            yield f"{field}: {address} is the NAT bridge's own address (gateway); pick another"


def rule_cluster_addresses_in_subnet(c) -> Iterator[str]:
    for i, node in enumerate(c.nodes):
        host = c.node_host(node)
        subnet = host.network.cluster_bridge.subnet
        where = f" of host {host.name!r}" if c.multi_host else ""
        if not _usable(node.cluster_address, subnet):
            yield (
                f"nodes[{i}].cluster_address: {node.cluster_address} is not a usable address of "
                f"the cluster bridge subnet {subnet}{where}"
            )


def rule_unique_addresses(c) -> Iterator[str]:
    for address in duplicates([a for _, a, _ in _nat_addresses(c)]):
        yield f"nodes[].nat_address: {address} is assigned more than once (each container needs its own)"
    for address in duplicates([n.cluster_address for n in c.nodes]):
        yield f"nodes[].cluster_address: {address} is assigned more than once"


def rule_forward_ports(c) -> Iterator[str]:
    ports = [("web_app.host_port", c.web_app.host_port)] if c.web_app else []
    ports += [("login.host_port", c.login.host_port)] if c.login else []
    ports += [(f"forwards[{i}].host_port", f.host_port) for i, f in enumerate(c.forwards)]
    for field, port in ports:
        if port < FIRST_FORWARD_PORT:
            yield f"{field}: {port} is a well-known port of the host; forward a port from {FIRST_FORWARD_PORT} up"
        elif port in SLURM_PORTS:
            yield f"{field}: {port} is Slurm's own port ({', '.join(map(str, sorted(SLURM_PORTS)))}); pick another"


def rule_forwards(c) -> Iterator[str]:
    forwards = c.all_forwards
    for port in duplicates([f.host_port for f in forwards]):
        yield (
            f"forwards[].host_port: host port {port} is forwarded more than once "
            "(web_app.host_port and login.host_port included)"
        )
    targets = c.node_names + ([c.web_app.name] if c.web_app else [])
    for i, forward in enumerate(c.forwards):
        if forward.target not in targets:
            yield f"forwards[{i}].target: {forward.target!r} is not a node or the web app ({targets})"
