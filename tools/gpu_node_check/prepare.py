"""The node config on a real GPU host without the cluster (docs/gpu.md, "On an NVIDIA H200"):
step one, here, on a machine with the project's venv and Debian's package mirror.

    venv/bin/python tools/gpu_node_check/prepare.py

Writes tools/gpu_node_check/work/: commands.json (the preflight and the two node containers'
create commands, scripts and environments, of a stack modelled on a one-GPU host: c000 owns
/dev/nvidia0, c001 has no GPU, 4 CPUs each) and debs/ (Debian 12's LXC 5.0.2, for a GPU host
that has no LXC and no package mirror). Then, as root on the GPU host, with this repository
copied there: `bash tools/gpu_node_check/check.sh` (it needs bash, python3 and the NVIDIA
driver; nothing of the venv).
"""

import copy
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORK = Path(__file__).with_name("work")
sys.path.insert(0, str(ROOT))

from tests.harness.command_executor import host_commands  # noqa: E402 (after the path)
from tests.harness.program_harness import run_program, stack_config  # noqa: E402

LXC_PACKAGES = ("lxc", "liblxc1", "liblxc-common", "lxc-templates", "libapparmor1")
WANTED = ("dev-host-preflight", "dev-c000-lxc", "dev-c001-lxc")


def stack() -> dict:
    config = copy.deepcopy(stack_config("local"))
    cluster = config["cluster"]
    cluster["name"] = "dev"
    cluster["host"]["shared_dir"] = "/srv/gpucluster/dev/shared"
    cluster["network"] = {
        "nat_bridge": {"name": "devbr0", "address": "10.61.3.1/24"},
        "cluster_bridge": {"name": "devbr1", "subnet": "10.61.5.0/24"},
    }
    cluster["gpu"] = {"devices": ["/dev/nvidia0"], "share_between_nodes": False}
    cluster["nodes"] = [
        {"name": "c000", "nat_address": "10.61.3.2", "cluster_address": "10.61.5.1", "cpus": 4, "gpus": 1},
        {"name": "c001", "nat_address": "10.61.3.3", "cluster_address": "10.61.5.2", "cpus": 4, "gpus": 0},
    ]
    cluster["slurm"] = {"controller": {"placement": "host"}, "partitions": [{"name": "gpu", "default": True}]}
    cluster.pop("web_app", None)
    return config


def main() -> int:
    commands = {c.name: c for c in host_commands(run_program(stack(), stack="dev"))}
    WORK.mkdir(exist_ok=True)
    dump = {
        name: {"create": c.create, "environment": c.environment, "interpreter": list(c.interpreter)}
        for name, c in commands.items()
        if name in WANTED
    }
    (WORK / "commands.json").write_text(json.dumps(dump, indent=1))
    debs = WORK / "debs"
    debs.mkdir(exist_ok=True)
    subprocess.run(["apt-get", "download", *LXC_PACKAGES], cwd=debs, check=True, capture_output=True)
    print(f"{WORK}: {sorted(dump)}, {len(list(debs.glob('*.deb')))} packages")
    return 0


if __name__ == "__main__":
    sys.exit(main())
