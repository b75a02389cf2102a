"""The arithmetic of what jobs cost, standard library only: the status command uses it, and the
metrics exporter runs it on a host beside its own copy of this file. Exact arithmetic
(Decimal): a price of 1.006 is 1.006, not a float."""

from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal

SECONDS_PER_HOUR = Decimal(3600)


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
