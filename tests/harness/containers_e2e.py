"""Jobs in container images, as the cluster's people run them from the login node (Pyxis's
`--container-image`, Enroot on the nodes), against the tests' registry (tests/harness/registry.py):
the image's system, not the node's; output in shared_dir owned by the person; the job's GPU
only, its cgroups and CPUs; a cached second start; each person's state apart; a missing
image or registry fails the job with a message and leaves nothing on the node; scancel ends
the container. Used by tests/harness/release_e2e.py (trixie), whose report the test reads."""

import re
import subprocess
import tempfile
import time
from pathlib import Path

from tests.harness.login_node import ssh_as
from tests.harness.registry import IMAGE_OS_RELEASE, Registry, push_image

DATA_DIR = "/var/lib/gpucluster-enroot"
# The node with two GPUs (release_config) and another one.
TWO_GPUS, OTHER = "c003", "c001"
# What opening each GPU device gives, as coreutils' and busybox's cat say it.
OPENED = re.compile(r"(/dev/nvidia\d+)'?: (No such device or address|Operation not permitted)")
PROBE = "for d in /dev/nvidia[0-9]*; do cat $d; done 2>&1; true"


def in_node(cluster: str, node: str, command: str) -> str:
    done = subprocess.run(
        ["lxc-attach", "-n", f"{cluster}-{node}", "--clear-env", "--", "sh", "-c", command],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return (done.stdout + done.stderr).strip()


def opened(output: str) -> dict[str, str]:
    return dict(OPENED.findall(output))


def timed(key: Path, person: str, command: str, check: bool = True) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    done = ssh_as(key, person, command, check=check)
    return done, round(time.monotonic() - started, 1)


def nothing_left(cluster: str, node: str, person_uid: int) -> str:
    """The person's unpacked containers and processes on the node (none expected)."""
    data = in_node(
        cluster, node, f"ls -A {DATA_DIR}/data/user-{person_uid}; find /run/pyxis -mindepth 2 2>/dev/null; true"
    )
    processes = in_node(cluster, node, f"pgrep -u {person_uid} -a || true")
    return "\n".join(part for part in (data, processes) if part)


def gone(cluster: str, node: str, person_uid: int, seconds: int = 60) -> str:
    """What is left of the person on the node once their jobs' epilogs have ended (Pyxis's
    runs `enroot list` as them for a moment after the job)."""
    deadline = time.monotonic() + seconds
    while (left := nothing_left(cluster, node, person_uid)) and time.monotonic() < deadline:
        time.sleep(1)
    return left


def jobs_in_container_images(cluster: str, keys: dict[str, Path], registry: Registry, shared: str) -> dict:
    report: dict = {}
    alice, bob = keys["alice"], keys["bob"]
    image = f"{registry.username}@{registry.image}"
    own = f"{shared}/alice"
    # The image's system: the first start pulls and unpacks, the second starts from the cache.
    srun = f"srun -w {OTHER} --container-image={image} cat /etc/os-release"
    first, report["first_start_s"] = timed(alice, "alice", srun)
    second, report["cached_start_s"] = timed(alice, "alice", srun)
    report["os_release"] = first.stdout.strip().splitlines()[:1]
    report["os_release_again"] = second.stdout.strip().splitlines()[:1]
    report["node_os"] = in_node(cluster, OTHER, ". /etc/os-release; echo $PRETTY_NAME")
    report["cached_layers"] = in_node(cluster, OTHER, f"ls {DATA_DIR}/cache/user-2101 | wc -l")
    # sbatch from her shared_dir directory: the batch script in the container, its output there.
    batch = (
        f"cd {own} && sbatch --wait -w {OTHER} -o container.out --container-image={image} "
        f"--container-workdir={own} --wrap 'head -n1 /etc/os-release; id -un; pwd; echo made > from-container' "
        f"&& cat container.out && stat -c '%U %n' container.out from-container && rm container.out from-container"
    )
    report["sbatch"] = ssh_as(alice, "alice", batch).stdout.strip().splitlines()
    # The job's GPU only: the probe inside the container and outside give the same.
    gpus = f"srun -w {TWO_GPUS} --gres=gpu:1 -c1"
    outside = ssh_as(alice, "alice", f"{gpus} sh -c '{PROBE}'").stdout
    inside = ssh_as(alice, "alice", f"{gpus} --container-image={image} sh -c '{PROBE}'").stdout
    report["gpus_outside"], report["gpus_inside"] = opened(outside), opened(inside)
    # Its CPUs and memory limit are the job's (the container's cgroup namespace starts at the
    # job step's cgroup: its limit is the job's --mem).
    limit = "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max"
    confined = f'{gpus} --mem=64M --container-image={image} sh -c "nproc; {limit}"'
    report["confined"] = ssh_as(alice, "alice", confined).stdout.strip().splitlines()
    # Each person's state is their own.
    ssh_as(bob, "bob", f"srun -w {OTHER} --container-image={image} true")
    report["enroot_dirs"] = in_node(
        cluster,
        OTHER,
        f"stat -c '%U %a %n' {DATA_DIR}/cache/user-2101 {DATA_DIR}/cache/user-2102 "
        f"{DATA_DIR}/data/user-2101 {DATA_DIR}/data/user-2102",
    ).splitlines()
    peek = ssh_as(bob, "bob", f"srun -w {OTHER} ls {DATA_DIR}/cache/user-2101", check=False)
    said = [line for line in peek.stderr.splitlines() if line.startswith("ls:")]
    report["bob_reads_alices_cache"] = f"{peek.returncode} {said}"
    # A missing image, a registry that does not answer: the job fails saying so, leaving nothing.
    host = registry.address.rsplit(":", 1)[0]
    for case, missing in (
        ("missing_image", f"{registry.address}#gpucluster/nothing:1"),
        ("missing_registry", f"{host}:5999#x:1"),
    ):
        done = ssh_as(
            alice, "alice", f"srun -w {OTHER} --container-image={registry.username}@{missing} true", check=False
        )
        report[case] = {"rc": done.returncode, "stderr": done.stderr.strip().splitlines()[-12:]}
    report["left_after_failures"] = gone(cluster, OTHER, 2101)
    # scancel ends the container's processes.
    job = ssh_as(
        alice,
        "alice",
        f"cd {own} && sbatch --parsable -w {OTHER} -o /dev/null --container-image={image} --wrap 'sleep 600'",
    ).stdout.strip()
    deadline = time.monotonic() + 120
    while "sleep 600" not in in_node(cluster, OTHER, "pgrep -u 2101 -a || true") and time.monotonic() < deadline:
        time.sleep(1)
    report["running_before_scancel"] = in_node(cluster, OTHER, "pgrep -u 2101 -a sleep || true")
    ssh_as(alice, "alice", f"scancel {job}")
    report["left_after_scancel"] = gone(cluster, OTHER, 2101)
    return report


def the_stacks_registry(cluster: str, keys: dict[str, Path], pull: str, push: str, password: str) -> dict:
    """The registry the stack runs (containers.registry): the operator pushes with the push
    account from the host, a person's job pulls from it; no person can push, at either port."""
    report: dict = {}
    tls = Path(f"/var/lib/gpucluster/{cluster}/registry/store/tls")
    ca = (tls / "ca.crt").read_text()
    key, data = (tls / "ca.key").stat(), tls.parent.parent.stat()
    report["ca_key"] = ", under ".join(f"{oct(st.st_mode & 0o777)} uid {st.st_uid}" for st in (key, data))
    operator = Registry(address=push, ca_cert=ca, username="operator", password=password, image="")
    with tempfile.TemporaryDirectory(prefix="gpucluster-push-") as work:
        push_image(operator, Path(work), "team/busybox:1", to=push)
    alice = keys["alice"]
    pulled = ssh_as(alice, "alice", f"srun -w {OTHER} --container-image={pull}#team/busybox:1 cat /etc/os-release")
    report["os_release"] = pulled.stdout.strip().splitlines()[:1]
    report["image_os_release"] = IMAGE_OS_RELEASE.splitlines()[:1]
    # A person's push: refused where people pull (read-only), and without the account where the
    # operator pushes (the status of the request that starts an upload).
    start_upload = "curl -sk -o /dev/null -w '%{{http_code}}' -X POST https://{}/v2/team/busybox/blobs/uploads/"
    report["person_push_at_pull_port"] = ssh_as(alice, "alice", start_upload.format(pull)).stdout.strip()
    report["person_push_at_push_port"] = ssh_as(alice, "alice", start_upload.format(push)).stdout.strip()
    return report
