"""What jobs cost: GPU-hours (elapsed time x allocated GPUs) times the price of a GPU-hour on
the host the job ran on. Exact arithmetic (Decimal): a price of 1.006 is 1.006, not a float."""

from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal

from components.aws.prices import hourly_price
from components.config import ClusterConfig, ClusterHostConfig

SECONDS_PER_HOUR = Decimal(3600)


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


def node_prices(config: ClusterConfig) -> dict[str, Decimal]:
    """USD per GPU-hour of each node, by its host."""
    by_host = {host.name: host_gpu_hour_price(config, host) for host in config.cluster_hosts}
    return {node.name: by_host[config.node_host(node).name] for node in config.nodes}


def job_price(nodes: list[str], prices: dict[str, Decimal]) -> Decimal:
    """USD per GPU-hour of a job: its nodes' price (their mean where a job spans hosts of
    different prices: --gres=gpu:N gives every node the same number of GPUs)."""
    known = [prices.get(node, Decimal(0)) for node in nodes]
    return sum(known, Decimal(0)) / len(known) if known else Decimal(0)


def gpu_hours(seconds: int, gpus: int) -> Decimal:
    return Decimal(seconds) * gpus / SECONDS_PER_HOUR


def job_cost(seconds: int, gpus: int, price: Decimal) -> Decimal:
    """elapsed x GPUs x price per GPU-hour (multiplied before the one division: exact whenever
    the cost has a finite decimal form)."""
    return Decimal(seconds) * gpus * price / SECONDS_PER_HOUR


@dataclass
class AccountCost:
    account: str
    jobs: int = 0
    gpu_hours: Decimal = Decimal(0)
    usd: Decimal = Decimal(0)


def per_account(rows: Iterable[tuple[str, int, int, list[str]]], prices: dict[str, Decimal]) -> list[AccountCost]:
    """(account, seconds, GPUs, nodes) of each job -> cost per account, the costliest first."""
    totals: dict[str, AccountCost] = {}
    for account, seconds, gpus, nodes in rows:
        entry = totals.setdefault(account, AccountCost(account))
        entry.jobs += 1
        entry.gpu_hours += gpu_hours(seconds, gpus)
        entry.usd += job_cost(seconds, gpus, job_price(nodes, prices))
    return sorted(totals.values(), key=lambda entry: (-entry.usd, entry.account))


def usd(amount: Decimal) -> str:
    """Money as shown: cents, or more digits below a cent so a small cost is not shown as 0."""
    if amount == 0 or abs(amount) >= Decimal("0.01"):
        return f"${amount:.2f}"
    return f"${amount:.6f}".rstrip("0")
