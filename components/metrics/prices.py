"""USD per GPU-hour of each node, by its host: the price the cost of a job is counted at
(the status command and the metrics exporter alike)."""

from decimal import Decimal
from typing import Any, Protocol

from components.aws.config import AwsConfig
from components.aws.prices import hourly_price


class PricedHost(Protocol):
    """What a price needs of a host (the composition's ClusterHostConfig)."""

    name: str
    gpu_hour_price: float
    connection: Any
    gpu: Any
    """the host's GPUs: `devices`"""

    @property
    def is_ec2(self) -> bool: ...


class PricedCluster(Protocol):
    """What the prices need of the cluster (the composition's ClusterConfig): its hosts, its
    nodes and where each runs, the EC2 site's prices, the burst partitions."""

    nodes: list[Any]
    aws: AwsConfig | None
    burst: Any
    """the burst config: `region`, `partitions` (each `name`, `gres_gpus`, `instance_types`, `node_names`)"""

    @property
    def cluster_hosts(self) -> list[PricedHost]: ...
    def node_host(self, node: Any) -> PricedHost: ...


def host_gpu_hour_price(config: PricedCluster, host: PricedHost) -> Decimal:
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


def burst_type_price(config: PricedCluster, instance_type) -> Decimal:
    """USD per hour of a burst type: its own price, else the dated table's (0 if neither)."""
    price = instance_type.price or hourly_price(config.burst.region, instance_type.name, {})
    return Decimal(str(price or 0))


def burst_gpu_hour_price(config: PricedCluster, partition) -> Decimal:
    """USD per GPU-hour on a burst partition's nodes: which type a job got is not recorded, so
    its dearest type's hourly price (an upper bound), shared by the GPUs every type has
    (`gres_gpus`). A partition without GPUs: 0, as every job is priced per GPU-hour."""
    gpus = partition.gres_gpus
    if gpus == 0:
        return Decimal(0)
    return max(burst_type_price(config, t) for t in partition.instance_types) / gpus


def burst_partition_prices(config: PricedCluster) -> dict[str, Decimal]:
    """USD per GPU-hour of each burst partition (none without `burst`)."""
    if config.burst is None:
        return {}
    return {p.name: burst_gpu_hour_price(config, p) for p in config.burst.partitions}


def node_prices(config: PricedCluster) -> dict[str, Decimal]:
    """USD per GPU-hour of each node, by its host; a burst node by its partition."""
    by_host = {host.name: host_gpu_hour_price(config, host) for host in config.cluster_hosts}
    prices = {node.name: by_host[config.node_host(node).name] for node in config.nodes}
    if config.burst is not None:
        for partition in config.burst.partitions:
            prices.update(dict.fromkeys(partition.node_names, burst_gpu_hour_price(config, partition)))
    return prices
