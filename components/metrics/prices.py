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
    nodes and where each runs, the EC2 site's prices."""

    nodes: list[Any]
    aws: AwsConfig | None

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


def node_prices(config: PricedCluster) -> dict[str, Decimal]:
    """USD per GPU-hour of each node, by its host."""
    by_host = {host.name: host_gpu_hour_price(config, host) for host in config.cluster_hosts}
    return {node.name: by_host[config.node_host(node).name] for node in config.nodes}
