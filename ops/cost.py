"""What jobs cost: GPU-hours (elapsed time x allocated GPUs) times the price of a GPU-hour on
the host the job ran on; the arithmetic is in components/metrics/cost_arithmetic.py (standard
library only: the metrics exporter runs a copy of it), the prices in components/metrics/prices.py."""

from components.metrics.cost_arithmetic import (  # noqa: F401 (the arithmetic is used through this module)
    SECONDS_PER_HOUR,
    AccountCost,
    gpu_hours,
    job_cost,
    job_price,
    per_account,
    usd,
)
from components.metrics.prices import burst_partition_prices, host_gpu_hour_price, node_prices  # noqa: F401
