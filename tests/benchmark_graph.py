"""Benchmark: how long the program takes to build its graph (under mocks) as the cluster grows.

Run: `venv/bin/python tests/benchmark_graph.py`. Prints, per node count, the wall time of a
full mocked run of __main__.py (config validation, rendering, every registration) and the
number of resources registered. What `pulumi preview` costs on top is the engine's own.
"""

import sys
import time
from ipaddress import IPv4Address
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]  # the repository root, when run as a script

from tests.harness.program_harness import run_program  # noqa: E402


def cluster_config(nodes: int) -> dict:
    base_nat, base_cluster = IPv4Address("10.50.0.10"), IPv4Address("10.51.0.10")
    return {
        "cluster": {
            "name": "bench",
            "host": {"shared_dir": "/srv/gpucluster/bench/shared"},
            "network": {
                "nat_bridge": {"name": "benchbr0", "address": "10.50.0.1/16"},
                "cluster_bridge": {"name": "benchbr1", "subnet": "10.51.0.0/16"},
            },
            "gpu": {"devices": ["/dev/nvidia0"]},
            "nodes": [
                {
                    "name": f"n{i:03d}",
                    "nat_address": str(base_nat + i),
                    "cluster_address": str(base_cluster + i),
                    "gpus": 0 if i else 1,
                }
                for i in range(nodes)
            ],
            "web_app": {"nat_address": "10.50.0.5"},
        }
    }


def main() -> None:
    print(f"{'nodes':>6} {'resources':>10} {'seconds':>8}")
    for nodes in (4, 64, 256):
        started = time.perf_counter()
        run = run_program(cluster_config(nodes), stack="bench")
        print(f"{nodes:>6} {len(run.resources):>10} {time.perf_counter() - started:>8.2f}")


if __name__ == "__main__":
    main()
