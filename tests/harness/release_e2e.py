"""The e2e stack on a node image of another release, through the real engine
(tests/test_e2e_release.py runs this module, on a host whose Slurm it hides). Every Slurm query
the program makes runs from the node image (the host's client wrappers); the report's Slurm
answers come from the host's client too.

    python -m tests.harness.release_e2e RELEASE [HIDDEN_PACKAGE...]   # prints a JSON report on its last line
"""

import copy
import json
import os
import secrets as secrets_module
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.harness.containers_e2e import jobs_in_container_images, the_stacks_registry
from tests.harness.e2e_teardown import ACCOUNTING_USERS, LOGIN, STACK, STACK_REGISTRY, e2e_config
from tests.harness.engine_cluster import apply, destroy, host_commands, update
from tests.harness.login_node import login_keys, login_node_serves_people, public_keys
from tests.harness.program_harness import run_program
from tests.harness.registry import Registry, running_registry
from tests.harness.slurm_client import cluster_slurm

SLURM_PROGRAMS = ("sinfo", "srun", "scontrol", "sacctmgr", "squeue", "slurmctld", "slurmd", "munged", "munge")

CONTROLLER = "c000"


# The tests' registry, on the host's address on the e2e NAT bridge (the nodes reach it there).
REGISTRY_ADDRESS = "10.43.3.1:5443"
REGISTRY_SECRET = "registryPassword"
# The stack's own registry (containers.registry), beside the tests' one.
PUSH_SECRET = STACK_REGISTRY["push_password_secret"]


def release_config(
    release: str, keys: dict[str, str], placement: str = "container", registry: Registry | None = None
) -> dict:
    """The e2e stack on `release`, with job accounting (slurmdbd of that release) and a login
    node where the people of `keys` (name: public key) log in, without the web app (its own
    test's); slurmctld in c000, or in its own container (placement 'host'); c003 with two GPUs;
    with a registry, jobs in container images from it (its CA and account)."""
    config = e2e_config(placement)
    cluster = config["cluster"]
    cluster["image"] = {"release": release}
    cluster["nodes"][3]["gpus"] = 2  # nvidia3 and nvidia4 (the web app's, which is not here)
    if registry is not None:
        cluster["containers"] = {
            "registries": [
                {
                    "host": registry.address,
                    "ca_cert": registry.ca_cert,
                    "username": registry.username,
                    "password_secret": REGISTRY_SECRET,
                }
            ],
            "registry": STACK_REGISTRY,
        }
    # Associations are enforced: the people submit in an account of theirs.
    cluster["accounting"] = {
        "nat_address": "10.43.3.20",
        "accounts": [{"name": "research", "users": sorted(keys)}],
        "keep_dump": False,  # destroy leaves nothing
    }
    cluster.pop("web_app", None)
    cluster["users"] = [{**user, "ssh_keys": [keys[user["name"]]]} for user in ACCOUNTING_USERS if user["name"] in keys]
    cluster["login"] = copy.deepcopy(LOGIN)
    return config


def recorded_gpu_jobs(cluster: str) -> list[str]:
    """Finished jobs with a GPU, as slurmdbd recorded them (sacct by the host's client)."""
    rows = host_client(cluster, "sacct", "-a", "-X", "-nP", "--format=JobID,State,AllocTRES")
    return [line for line in rows.splitlines() if "COMPLETED" in line and "gres/gpu=1" in line]


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


# What a query (squeue, sinfo, scontrol show) prints when slurmctld is slower than MessageTimeout to answer:
# on 2 cores shared with the other tests it is, just after every container was replaced. The
# query is asked again; a command that changes something is never repeated.
SLOW_CONTROLLER = "Socket timed out on send/recv operation"
QUERIES = ("squeue", "sinfo")


def host_client(cluster: str, *argv: str) -> str:
    """A Slurm command by the host's client (the program's wrappers: the node image's Slurm)."""
    env = cluster_slurm(f"/var/lib/gpucluster/{cluster}")
    deadline = time.monotonic() + 90
    while True:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=180, check=False, env={**os.environ, **env})
        query = argv[0] in QUERIES or (argv[0] == "scontrol" and "show" in argv)
        slow = query and SLOW_CONTROLLER in done.stderr
        if done.returncode == 0 or not slow or time.monotonic() > deadline:
            break
        print(f"{' '.join(argv)}: {done.stderr.strip()}; asking again", file=sys.stderr)
        time.sleep(3)
    assert done.returncode == 0, f"{' '.join(argv)} by the host's client failed: {done.stdout}{done.stderr}"
    return done.stdout.strip()


def job_state_within(cluster: str, job: str, state: str, seconds: int) -> str:
    """The job's state once it is `state`, or after `seconds` (slurmctld's view)."""
    deadline = time.monotonic() + seconds
    while True:
        shown = host_client(cluster, "scontrol", "-o", "show", "job", job)
        now = next(word.split("=", 1)[1] for word in shown.split() if word.startswith("JobState="))
        if now == state or time.monotonic() >= deadline:
            return now
        time.sleep(1)


def controller_forwards(cluster: str, node: str) -> list[str]:
    """The rules in a node's network namespace that have its address answer for a moved slurmctld."""
    pid = subprocess.run(["lxc-info", "-n", f"{cluster}-{node}", "-p", "-H"], capture_output=True, text=True).stdout
    rules = subprocess.run(["nsenter", "-t", pid.strip(), "-n", "iptables-save"], capture_output=True, text=True)
    return [line for line in rules.stdout.splitlines() if f"gpucluster:{cluster}:ctld-move:" in line]


def main(release: str, hidden: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as keys_dir, running_registry(REGISTRY_ADDRESS) as registry:
        return run(release, hidden, login_keys(Path(keys_dir)), registry)


def run(release: str, hidden: list[str], keys: dict[str, Path], registry: Registry) -> dict:
    people = public_keys(keys)
    config = release_config(release, people, registry=registry)
    cluster = config["cluster"]["name"]
    secrets = {REGISTRY_SECRET: registry.password, PUSH_SECRET: secrets_module.token_urlsafe(18)}
    commands = host_commands(run_program(config, stack=STACK, secrets=secrets))
    report: dict = {"release": release, "hidden": hidden}
    known = subprocess.run(["dpkg-query", "-W", *hidden], capture_output=True, text=True, check=False)
    report["host_packages_known"] = [line.split()[0] for line in known.stdout.splitlines() if line.split()[1:]]
    report["host_programs"] = [name for name in SLURM_PROGRAMS if shutil.which(name)]
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
        report["sinfo"] = host_client(cluster, "sinfo", "-N", "-h", "-o", "%N %T %G")
        report["srun_N4_hostname"] = sorted(
            host_client(cluster, "srun", "--chdir=/tmp", "-N4", "hostname").splitlines()
        )
        report["gpu_job"] = host_client(
            cluster,
            *("srun", "--chdir=/tmp", "-N1", "-w", "c002", "--gres=gpu:1", "sh", "-c"),
            'echo "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"; ls /dev | grep "^nvidia[0-9]"; '
            "grep devices /proc/self/cgroup",
        ).splitlines()
        deadline = time.monotonic() + 90
        while not recorded_gpu_jobs(cluster) and time.monotonic() < deadline:
            time.sleep(1)
        report["accounted_gpu_jobs"] = recorded_gpu_jobs(cluster)
        report["slurmdbd"] = in_node(cluster, "db", "slurmdbd", "-V")
        # A person on the login node (the release's sshd and Slurm client).
        login: list[str] = []
        login_node_serves_people(keys, config["cluster"]["host"]["shared_dir"], login)
        report["login"] = login
        # Jobs in container images (Pyxis and Enroot), from the login node.
        report["containers"] = jobs_in_container_images(
            cluster, keys, registry, config["cluster"]["host"]["shared_dir"]
        )
        report["stack_registry"] = the_stacks_registry(
            cluster, keys, *(f"{STACK_REGISTRY['nat_address']}:{port}" for port in (5000, 5001)), secrets[PUSH_SECRET]
        )
        # The change table's controller row on this release: slurmctld moves into its own
        # container; the queue (a held job) moves with it, and a job running across the move
        # ends in the new controller's records (c000's address forwards to it meanwhile).
        held = host_client(cluster, "sbatch", "--parsable", "--hold", "--chdir=/tmp", "--wrap", "true")
        finish = Path(config["cluster"]["host"]["shared_dir"]) / "across-the-move"
        finish.unlink(missing_ok=True)
        across = host_client(
            *(cluster, "sbatch", "--parsable", "-w", "c001", "--chdir=/tmp", "--wrap"),
            f"while [ ! -e {finish} ]; do sleep 1; done",
        )
        report["across_before_move"] = job_state_within(cluster, across, "RUNNING", 60)
        moved_config = release_config(release, people, "host", registry)
        moved = host_commands(run_program(moved_config, stack=STACK, secrets=secrets))
        _, actions = update(commands, moved, timeout=900)
        commands = moved
        report["controller_moved"] = sorted(f"{name} {action}" for name, action in actions.items() if action != "same")
        report["held_after_move"] = host_client(cluster, "squeue", "-h", "-j", held, "-o", "%T")
        report["across_after_move"] = job_state_within(cluster, across, "RUNNING", 0)
        report["forwards_in_c000"] = len(controller_forwards(cluster, "c000"))
        finish.touch()
        started_end = time.monotonic()
        report["across_ended"] = job_state_within(cluster, across, "COMPLETED", 90)
        report["across_end_recorded_s"] = round(time.monotonic() - started_end, 1)
        finish.unlink()
        report["slurmctld_in"] = in_node(
            cluster, "slurmctld", "sh", "-c", "slurmctld -V; pidof slurmctld >/dev/null && echo running"
        )
        report["srun_after_move"] = sorted(host_client(cluster, "srun", "--chdir=/tmp", "-N4", "hostname").splitlines())
        # The change table's image row on this release: the image is rebuilt and every container
        # replaced; the queue and the accounting records are kept.
        rebuilt_config = copy.deepcopy(moved_config)
        rebuilt_config["cluster"]["image"]["extra_packages"] = ["less"]
        rebuilt = host_commands(run_program(rebuilt_config, stack=STACK, secrets=secrets))
        _, actions = update(commands, rebuilt, timeout=1200)
        commands = rebuilt
        report["image_rebuilt"] = sorted(f"{name} {action}" for name, action in actions.items() if action == "replace")
        report["less_in_c002"] = in_node(cluster, "c002", "sh", "-c", "command -v less")
        report["held_after_rebuild"] = host_client(cluster, "squeue", "-h", "-j", held, "-o", "%T")
        report["accounted_after_rebuild"] = recorded_gpu_jobs(cluster)
        host_client(cluster, "scancel", held)
        report["srun_after_rebuild"] = sorted(
            host_client(cluster, "srun", "--chdir=/tmp", "-N4", "hostname").splitlines()
        )
        report["whole_s"] = round(time.monotonic() - started, 1)
    finally:
        report["destroy_s"] = round(destroy(commands).wall_seconds, 1)
    return report


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2:])))
