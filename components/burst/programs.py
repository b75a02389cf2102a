"""The config the burst programs read on the controller (files/burst_common.py): the cluster,
its region and endpoint, each partition's nodes, types (by launch template) and capacity, the
subnets in order, the boot script without a node name, the timers and the paths."""

from components.burst.cloud import template_name
from components.burst.config import BurstConfig
from components.burst.layout import BurstLayout


def program_config(
    cluster: str, burst: BurstConfig, subnet_ids: list[str], user_data: str, slurm_conf: str | None = None
) -> dict:
    """`slurm_conf`: the path scontrol reads where slurmctld runs on a host (in a container,
    Debian's /etc/slurm/slurm.conf is the default)."""
    layout = BurstLayout(cluster)
    return {
        "cluster": cluster,
        "slurm_conf": slurm_conf,
        "region": burst.region,
        "endpoint_url": burst.api_endpoint,
        "subnets": list(subnet_ids),
        "partitions": [
            {
                "name": p.name,
                "nodes": p.node_names,
                "capacity": p.capacity,
                "types": [
                    {"name": t.name, "template": template_name(cluster, p.name, t.name)} for t in p.instance_types
                ],
            }
            for p in burst.partitions
        ],
        "user_data": user_data,
        "capacity_skip_s": burst.capacity_skip_s,
        "orphan_grace_s": burst.orphan_grace_s,
        "credentials_file": layout.credentials_file,
        "state_dir": layout.state_dir,
        "log_file": layout.log_file,
    }
