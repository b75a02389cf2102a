"""The e2e stack on a node image of another release, through the real engine, with the node
image's Slurm client standing in for the host's (tests/test_e2e_release.py runs this module).

A host's slurm-client talks only to a controller of its own Slurm or at most two releases
newer: this Debian 12 host's 22.05 cannot talk to trixie's 24.11 slurmctld. Until the program
runs its Slurm queries from the node image (a later change), this runner is started in a mount
namespace of its own where the host's client programs (/usr/bin/sinfo, srun, ...) are a
wrapper that runs the same command in the controller's container (lxc-attach): every create,
the health gate's srun among them, then queries the image's 24.11 through the engine's run.
Nothing outside that namespace sees the wrapper.

    python -m tests.harness.release_e2e RELEASE   # prints a JSON report on its last line
"""

import json
import subprocess
import sys
import time

from tests.harness.e2e_teardown import STACK, e2e_config
from tests.harness.engine_cluster import apply, destroy, host_commands
from tests.harness.program_harness import run_program

CONTROLLER = "c000"


def release_config(release: str) -> dict:
    """The e2e stack (slurmctld in c000) on `release`, without the web app (its own test's)."""
    config = e2e_config("container")
    config["cluster"]["image"] = {"release": release}
    config["cluster"].pop("web_app", None)
    return config


def in_node(cluster: str, node: str, *argv: str, timeout: int = 120) -> str:
    done = subprocess.run(
        ["lxc-attach", "-n", f"{cluster}-{node}", "--clear-env", "--", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"{' '.join(argv)} in {node} failed: {done.stdout}{done.stderr}"
    return done.stdout.strip()


def main(release: str) -> dict:
    config = release_config(release)
    cluster = config["cluster"]["name"]
    commands = host_commands(run_program(config, stack=STACK))
    report: dict = {"release": release}
    destroy(commands)  # what a killed run left
    try:
        started = time.monotonic()
        timeline = apply(commands, timeout=1500)
        report["bring_up_s"] = round(timeline.finished(f"{cluster}-health"), 1)
        image = next(step for step in timeline.steps if step.name == f"{cluster}-image-rootfs")
        report["image_build_s"] = round(image.seconds, 1)
        health = next(step for step in timeline.steps if step.name == f"{cluster}-health")
        report["health_gate"] = health.stdout.strip().splitlines()[-1:]
        report["os"] = in_node(cluster, "c001", "sh", "-c", ". /etc/os-release; echo $PRETTY_NAME")
        report["systemd"] = in_node(cluster, "c001", "sh", "-c", "systemctl --version | head -n1")
        report["system_state"] = in_node(cluster, "c001", "sh", "-c", "systemctl is-system-running || true")
        report["cgroup"] = in_node(cluster, "c001", "sh", "-c", "stat -f -c %T /sys/fs/cgroup; cat /proc/1/cgroup")
        report["slurmd"] = in_node(cluster, "c001", "slurmd", "-V")
        report["slurmctld"] = in_node(cluster, CONTROLLER, "slurmctld", "-V")
        report["sinfo"] = in_node(cluster, CONTROLLER, "sinfo", "-N", "-h", "-o", "%N %T %G")
        report["srun_N4_hostname"] = sorted(
            in_node(cluster, CONTROLLER, "srun", "--chdir=/tmp", "-N4", "hostname").splitlines()
        )
        report["gpu_job"] = in_node(
            cluster,
            CONTROLLER,
            *("srun", "--chdir=/tmp", "-N1", "-w", "c002", "--gres=gpu:1", "sh", "-c"),
            'echo "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"; ls /dev | grep "^nvidia[0-9]"; '
            "grep devices /proc/self/cgroup",
        ).splitlines()
        report["whole_s"] = round(time.monotonic() - started, 1)
    finally:
        report["destroy_s"] = round(destroy(commands).wall_seconds, 1)
    return report


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
