"""USD per GPU-hour of each node, by its host: the price the cost of a job is counted at
(the status command and the metrics exporter alike)."""

from decimal import Decimal

from components.aws.prices import hourly_price
from components.config import ClusterConfig, ClusterHostConfig, burst_price


def host_gpu_hour_price(config: ClusterConfig, host: ClusterHostConfig) -> Decimal:
    """USD per GPU-hour on a host: its `gpu_hour_price`; on an EC2 host left at 0, the
    instance's hourly price (the stack's aws.prices, else the dated table) shared by its GPUs."""
    if host.gpu_hour_price or not host.is_ec2:
        return Decimal(str(host.gpu_hour_price))
    aws = config.aws
    price = hourly_price(aws.region, host.connection.instance_type, aws.prices) if aws else None
    gpus = len(host.gpu.devices)
    if price is None or gpus == 0:
        return Decimal(0)
    return Decimal(str(price)) / gpus


def burst_gpu_hour_price(config: ClusterConfig, partition) -> Decimal:
    """USD per GPU-hour on a burst partition's nodes: which type a job got is not recorded, so
    its dearest type's hourly price (an upper bound), shared by the GPUs every type has
    (`gres_gpus`). A partition without GPUs: 0, as every job is priced per GPU-hour."""
    gpus = partition.gres_gpus
    if gpus == 0:
        return Decimal(0)
    dearest = max(Decimal(str(burst_price(config, t) or 0)) for t in partition.instance_types)
    return dearest / gpus


def burst_partition_prices(config: ClusterConfig) -> dict[str, Decimal]:
    """USD per GPU-hour of each burst partition (none without `burst`)."""
    if config.burst is None:
        return {}
    return {p.name: burst_gpu_hour_price(config, p) for p in config.burst.partitions}


def node_prices(config: ClusterConfig) -> dict[str, Decimal]:
    """USD per GPU-hour of each node, by its host; a burst node by its partition."""
    by_host = {host.name: host_gpu_hour_price(config, host) for host in config.cluster_hosts}
    prices = {node.name: by_host[config.node_host(node).name] for node in config.nodes}
    if config.burst is not None:
        for partition in config.burst.partitions:
            price = burst_gpu_hour_price(config, partition)
            prices.update(dict.fromkeys(partition.node_names, price))
    return prices
