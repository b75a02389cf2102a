"""The stack of tests/test_e2e_multihost_accounting.py, and its teardown.

Cluster `mha` on two hosts: h1 is this machine (c000 with slurmctld, c001), h2 a network
namespace reached over SSH (c002, c003) that also holds the accounting database
(`accounting.host: h2`), so slurmctld and slurmdbd talk across the hosts. Its names (cluster,
bridges, subnets, namespace, directories, people) are used by no other test.
"""

import copy
import shutil
import subprocess
from pathlib import Path

from tests.harness import ssh_hosts
from tests.harness.command_executor import destroy, host_commands
from tests.harness.e2e_teardown import PLACEHOLDER_KEY, SECRET, run_here, ssh_connection
from tests.harness.program_harness import run_program, stack_config
from tests.harness.ssh_hosts import SshHost

STACK = "e2e"  # the e2e stack file's image and Slurm settings, with the cluster below
CLUSTER = "mha"
# The site network 10.58.0.0/30 joins h2 to this machine; h1's bridges start with `e2e` so
# that h2's traffic reaches its containers unmasqueraded (tests/harness/ssh_hosts.py).
HOST2 = SshHost("mha2", "10.58.0.2", 22, netns="e2e-mha2", site_address="10.58.0.1")
HOST2_DIRS = {
    "state_dir": "/var/lib/gpucluster-mha-h2",
    "run_dir": "/run/gpucluster-mha-h2-run",
    "lxc_dir": "/var/lib/lxc-mha-h2",
}
SHARED_DIR = "/srv/gpucluster/mha/shared"
USERS = [{"name": "dana", "uid": 2111, "gid": 2111}, {"name": "erin", "uid": 2112, "gid": 2112}]
HEALTH_INTERVAL_S = 10


def config(host_key: str = PLACEHOLDER_KEY) -> dict:
    """Two nodes per host, one stand-in GPU each; accounts `physics` (dana, one GPU at once
    across the cluster) and `chem` (erin, no limit); the GPU health check on every node."""
    config = copy.deepcopy(stack_config(STACK))
    cluster = config["cluster"]
    for field in ("host", "network", "gpu", "web_app"):
        cluster.pop(field, None)
    gpu = {"stand_in": {"count": 2}, "driver_files": [], "cuda_path": None}
    cluster["name"] = CLUSTER
    cluster["hosts"] = [
        {
            "name": "h1",
            "address": HOST2.site_address,
            "shared_dir": SHARED_DIR,
            "network": {
                "nat_bridge": {"name": "e2embr0", "address": "10.56.3.1/24"},
                "cluster_bridge": {"name": "e2embr1", "subnet": "10.56.5.0/24"},
            },
            "gpu": gpu,
        },
        {
            "name": "h2",
            "connection": ssh_connection(HOST2, host_key),
            "address": HOST2.address,
            **HOST2_DIRS,
            "shared_dir": SHARED_DIR,
            "network": {
                "nat_bridge": {"name": "e2embr0", "address": "10.57.3.1/24"},
                "cluster_bridge": {"name": "e2embr1", "subnet": "10.57.5.0/24"},
            },
            "gpu": copy.deepcopy(gpu),
        },
    ]
    cluster["nodes"] = [
        {"name": "c000", "host": "h1", "nat_address": "10.56.3.2", "cluster_address": "10.56.5.2"},
        {"name": "c001", "host": "h1", "nat_address": "10.56.3.3", "cluster_address": "10.56.5.3"},
        {"name": "c002", "host": "h2", "nat_address": "10.57.3.2", "cluster_address": "10.57.5.2"},
        {"name": "c003", "host": "h2", "nat_address": "10.57.3.3", "cluster_address": "10.57.5.3"},
    ]
    cluster["slurm"]["controller"] = {"placement": "container", "node": "c000"}
    cluster["slurm"]["health_check"] = {"interval_s": HEALTH_INTERVAL_S}
    cluster["users"] = copy.deepcopy(USERS)
    cluster["accounting"] = {
        "host": "h2",
        "nat_address": "10.57.3.20",
        "keep_dump": False,
        "accounts": [
            {"name": "physics", "gpus": 1, "users": ["dana"]},
            {"name": "chem", "users": ["erin"]},
        ],
    }
    return config


def teardown() -> None:
    """Destroy whatever the test's stack left, on each host directly (no SSH), then h2 itself."""
    try:
        if any(Path(p).exists() for p in (f"/run/netns/{HOST2.netns}", HOST2.directory, *HOST2_DIRS.values())):
            commands = host_commands(run_program(config(), stack=STACK, secrets={SECRET: "placeholder"}))
            destroy(run_here(commands, {HOST2.address: HOST2}))
        else:  # nothing on h2: no namespace is made just to delete nothing in it
            commands = host_commands(run_program(config(), stack=STACK, secrets={SECRET: "placeholder"}))
            destroy([c for c in commands if c.connection is None])
    finally:
        ssh_hosts.remove(HOST2)
        for directory in HOST2_DIRS.values():
            subprocess.run(["rmdir", directory], capture_output=True, check=False)
        for directory in (SHARED_DIR, Path(SHARED_DIR).parent, Path(SHARED_DIR).parent.parent):
            subprocess.run(["rmdir", str(directory)], capture_output=True, check=False)
        kept = Path(f"/var/cache/gpucluster/{CLUSTER}/accounting")
        if kept.exists():
            shutil.rmtree(kept)
