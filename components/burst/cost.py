"""What a burst partition costs: per node-hour of each type, and the most per hour (every
node up on its dearest type). Instances only, as the stack's `cost` output."""

from components.aws.prices import PRICES_DATE, hourly_price
from components.burst.config import BurstConfig


def burst_estimate(config: BurstConfig) -> dict:
    partitions = {}
    for partition in config.partitions:
        prices = {t.name: t.price or hourly_price(config.region, t.name, {}) for t in partition.instance_types}
        partitions[partition.name] = {
            "node_hour_usd": prices,
            "max_nodes": partition.max_nodes,
            "max_hourly_usd": round(partition.max_nodes * max(prices.values()), 4),
            "capacity": partition.capacity,
        }
    return {
        "region": config.region,
        "partitions": partitions,
        "max_hourly_usd": round(sum(p["max_hourly_usd"] for p in partitions.values()), 4),
        "prices": f"given per type, else the on-demand table of {PRICES_DATE}",
        "note": "billed only while Slurm keeps a node up (SuspendTime after its last job); spot is cheaper; "
        "the VPN and the Secrets Manager endpoint cost by the hour too",
    }
