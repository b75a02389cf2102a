"""The cluster's rule on its burst partitions (registered in components/composition/config.py)."""

from collections.abc import Iterator

from components.aws.prices import PRICES_DATE, hourly_price
from components.common.config_types import duplicates
from components.network.rules import host_subnets


def burst_price(c, instance_type) -> float | None:
    """USD per hour of a burst type: its own price, else the dated table's."""
    return instance_type.price or hourly_price(c.burst.region, instance_type.name, {})


def rule_burst(c) -> Iterator[str]:
    """Burst partitions: priced types, subnets apart from every other network of the cluster,
    room for every node, names of their own, and a controller the burst nodes reach without NAT."""
    burst = c.burst
    if burst is None:
        return
    for i, partition in enumerate(burst.partitions):
        for j, instance_type in enumerate(partition.instance_types):
            if burst_price(c, instance_type) is None:
                yield (
                    f"burst.partitions[{i}].instance_types[{j}].price: no price for {instance_type.name} in "
                    f"{burst.region} (table of {PRICES_DATE}); give its USD per hour"
                )
    others = [(f"{prefix}{field}", net) for prefix, host, _ in c.each_host() for field, net in host_subnets(host)]
    if c.aws is not None:
        others.append(("aws.vpc.cidr", getattr(c.aws.vpc, "cidr", c.aws.vpc.subnet_cidr)))
    for i, subnet in enumerate(burst.subnets):
        for field, net in others:
            if subnet.cidr.overlaps(net):
                yield f"burst.subnets[{i}].cidr: {subnet.cidr} overlaps {field} {net}; burst subnets are routed apart"
    router = burst.vpn.router_address
    if router in burst.vpc_cidr or any(router in net for _, net in others):
        yield (
            f"burst.vpn.router_address: {router} is inside the burst VPC or a container subnet; give the "
            "on-premises address of the VPN router the controller's host reaches directly"
        )
    for j, net in enumerate(burst.on_premises_cidrs):
        if net.overlaps(burst.vpc_cidr):
            yield f"burst.on_premises_cidrs[{j}]: {net} overlaps burst.vpc_cidr {burst.vpc_cidr}"
    wanted, room = sum(p.max_nodes for p in burst.partitions), burst.addresses_available
    if wanted > room:
        yield (
            f"burst.partitions[].max_nodes: {wanted} nodes in all, but burst.subnets hold {room} instances "
            "(AWS keeps 5 addresses of each subnet); lower max_nodes or add subnets"
        )
    controller = c.controller_address
    if not any(controller in net for net in burst.on_premises_cidrs):
        yield (
            f"burst.on_premises_cidrs: the controller's address {controller} is in none of them; burst nodes "
            "would reach slurmctld only through NAT, and slurmctld must connect back to the address it sees "
            "(cloud_reg_addrs): add the controller's network"
        )
    taken = set(c.node_names) | {p.name for p in c.slurm.partitions}
    for i, partition in enumerate(burst.partitions):
        if partition.name in {p.name for p in c.slurm.partitions}:
            yield f"burst.partitions[{i}].name: {partition.name!r} is also a slurm.partitions name"
        clash = sorted(taken & set(partition.node_names))
        if clash:
            yield f"burst.partitions[{i}].name: its node {clash[0]} is also a node or partition name"
    for name in duplicates([p.name for p in burst.partitions]):
        yield f"burst.partitions[].name: {name!r} is listed more than once"
