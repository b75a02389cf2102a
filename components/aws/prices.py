"""What the stack's instances cost: a dated on-demand price table kept in the repository,
overridable per stack (`aws.prices`). An estimate, not a bill: EBS, traffic and spot
discounts are not counted."""

# USD per instance-hour, on demand, Linux. Source: the EC2 on-demand price list, December 2024
# (AWS cut P4 and P5 prices by up to 45% in June 2025: set aws.prices for today's figures).
PRICES_DATE = "2024-12"
PRICES: dict[str, dict[str, float]] = {
    "us-east-1": {
        "g4dn.xlarge": 0.526,
        "g4dn.2xlarge": 0.752,
        "g4dn.12xlarge": 3.912,
        "g5.xlarge": 1.006,
        "g5.2xlarge": 1.212,
        "g5.12xlarge": 5.672,
        "g5.48xlarge": 16.288,
        "g6.xlarge": 0.8048,
        "p4d.24xlarge": 32.7726,
        "p5.48xlarge": 98.32,
    },
    "us-west-2": {
        "g4dn.xlarge": 0.526,
        "g5.xlarge": 1.006,
        "g5.2xlarge": 1.212,
        "g6.xlarge": 0.8048,
        "p4d.24xlarge": 32.7726,
        "p5.48xlarge": 98.32,
    },
    "eu-west-1": {
        "g4dn.xlarge": 0.587,
        "g5.xlarge": 1.123,
        "g5.2xlarge": 1.353,
        "p4d.24xlarge": 35.3916,
    },
}
# vCPUs of the types above (the EC2 instance type list): a burst partition's `cpus` is checked
# against them; a type not listed here is not checked.
VCPUS: dict[str, int] = {
    "g4dn.xlarge": 4,
    "g4dn.2xlarge": 8,
    "g4dn.12xlarge": 48,
    "g5.xlarge": 4,
    "g5.2xlarge": 8,
    "g5.12xlarge": 48,
    "g5.48xlarge": 192,
    "g6.xlarge": 4,
    "p4d.24xlarge": 96,
    "p5.48xlarge": 192,
}
HOURS_PER_MONTH = 730  # AWS's own convention (8760 / 12)


def hourly_price(region: str, instance_type: str, overrides: dict[str, float]) -> float | None:
    """USD per hour of one instance: the stack's override, else the table's; None if unknown."""
    if instance_type in overrides:
        return overrides[instance_type]
    return PRICES.get(region, {}).get(instance_type)


def estimate(region: str, instance_types: list[str], overrides: dict[str, float]) -> dict:
    """The stack output `cost`: per instance type, and in all, per hour and per month."""
    by_type: dict[str, dict] = {}
    for instance_type in instance_types:
        price = hourly_price(region, instance_type, overrides)
        entry = by_type.setdefault(instance_type, {"count": 0, "hourly_usd": price})
        entry["count"] += 1
    hourly = sum(entry["count"] * entry["hourly_usd"] for entry in by_type.values())
    return {
        "region": region,
        "instances": by_type,
        "hourly_usd": round(hourly, 4),
        "monthly_usd": round(hourly * HOURS_PER_MONTH, 2),
        "prices": "stack overrides (aws.prices)" if overrides else f"on-demand table of {PRICES_DATE}",
        "note": "estimate of the instances only: EBS volumes, Elastic IPs, traffic and spot discounts are not counted",
    }
