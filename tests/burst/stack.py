"""The burst test stack: the local example stack with a burst partition of two types over
two zones, its VPN to the on-premises network the controller's container subnet is in."""

import copy

from tests.harness.program_harness import stack_config

BURST = {
    "region": "us-east-1",
    "ami": "ami-0a1b2c3d4e5f67890",
    "vpc_cidr": "10.90.0.0/16",
    "subnets": [
        {"cidr": "10.90.1.0/24", "availability_zone": "us-east-1a"},
        {"cidr": "10.90.2.0/24", "availability_zone": "us-east-1b"},
    ],
    "on_premises_cidrs": ["10.42.0.0/16"],
    "vpn": {"customer_gateway_address": "198.51.100.7", "router_address": "192.168.1.254"},
    "partitions": [
        {
            "name": "burst",
            "instance_types": [{"name": "g5.xlarge", "gpus": 1}, {"name": "g4dn.xlarge", "gpus": 1}],
            "max_nodes": 4,
            "cpus": 4,
            "suspend_time_s": 300,
            "resume_timeout_s": 600,
        }
    ],
}


def burst_stack() -> dict:
    """The whole stack config (`{"cluster": ...}`) of the burst test stack."""
    config = copy.deepcopy(stack_config("local"))
    config["cluster"]["burst"] = copy.deepcopy(BURST)
    return config
