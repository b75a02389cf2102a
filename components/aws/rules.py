"""The cluster's rule on its EC2 hosts (registered in components/composition/config.py)."""

from collections.abc import Iterator

from components.aws.prices import PRICES_DATE, hourly_price
from components.network.rules import host_subnets


def rule_aws(c) -> Iterator[str]:
    """EC2 hosts: an `aws` section, safe admin networks, fixed private addresses in the subnet,
    container subnets outside the VPC, daemons in containers, a known price."""
    if c.hosts is None:
        if c.aws is not None:
            yield "aws: EC2 hosts are listed under hosts (hosts[].connection.kind: ec2); this stack has no hosts"
        return
    hosts = c.cluster_hosts
    ec2 = [(i, h) for i, h in enumerate(hosts) if h.is_ec2]
    if c.aws is None:
        for i, _ in ec2:
            yield f"hosts[{i}].connection: kind ec2 needs cluster.aws (region, ami, ssh_public_key, admin_cidrs)"
        return
    if not ec2:
        yield "aws: no host has connection.kind ec2; remove aws or add an EC2 host"
        return
    aws = c.aws
    for j, cidr in enumerate(aws.admin_cidrs):
        if cidr.prefixlen == 0 and not aws.allow_ssh_from_anywhere:
            yield (
                f"aws.admin_cidrs[{j}]: {cidr} opens SSH to the whole internet; name your networks, "
                "or set aws.allow_ssh_from_anywhere: true to mean it"
            )
    subnet = aws.vpc.subnet_cidr
    vpc_cidr = getattr(aws.vpc, "cidr", subnet)
    if not subnet.subnet_of(vpc_cidr):
        yield f"aws.vpc.subnet_cidr: {subnet} is not inside aws.vpc.cidr {vpc_cidr}"
    for i, host in ec2:
        if host.address is None:
            yield f"hosts[{i}].address: required for an EC2 host: the instance's fixed private address in {subnet}"
        elif (
            host.address not in subnet
            or int(host.address) - int(subnet.network_address) < 4
            or (host.address == subnet.broadcast_address)
        ):
            yield (
                f"hosts[{i}].address: {host.address} is not a usable address of aws.vpc.subnet_cidr {subnet} "
                "(AWS keeps the first four and the last)"
            )
        for field, net in host_subnets(host):
            if net.overlaps(vpc_cidr):
                yield f"hosts[{i}].{field}: {net} overlaps the VPC {vpc_cidr}; container subnets are routed beside it"
        if host.retired:
            yield f"hosts[{i}].retired: an EC2 host goes with its instance; remove it from hosts instead"
        if hourly_price(aws.region, host.connection.instance_type, aws.prices) is None:
            yield (
                f"hosts[{i}].connection.instance_type: no price for {host.connection.instance_type} in {aws.region} "
                f"(table of {PRICES_DATE}); add it under aws.prices (USD per hour)"
            )
    controller = c.slurm.controller
    if controller.placement == "host" and controller.node is None and c.controller_host.is_ec2:
        yield (
            f"slurm.controller.placement: 'host' on the EC2 host {c.controller_host.name!r}; on EC2 hosts slurmctld "
            "runs in a node container (slurmctld's own container is not proven on EC2 yet): use placement 'container'"
        )
