"""End-to-end: bring the `e2e` stack up on this machine for real, check it, re-apply, destroy.

The real engine applies the stack (`pulumi up` of a stack of its own,
tests/harness/engine_cluster.py); then the cluster is checked with the tutorial's own
commands. Needs root and the Debian packages .ci/run installs; it fails, never skips, when
they are missing. Everything it makes is removed in `finally` blocks.
"""

import json
import os
import shutil
import stat
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from components.slurm.config import LoginConfig
from components.slurm.login import login_host_id_base
from tests.app.e2e_web_page import check_web_page
from tests.harness.e2e_teardown import (
    OUTSIDE_LINK,
    OUTSIDE_NS,
    PLACEMENTS,
    STACK,
    e2e_config,
    remove_outside_namespace,
    teardown,
)
from tests.harness.engine_cluster import apply, destroy, host_commands, update
from tests.harness.program_harness import nodes_whose_share_changes, run_program
from tests.harness.slurm_client import client_container, cluster_slurm

REQUIRED_TOOLS = [
    "lxc-create",
    "lxc-copy",
    "debootstrap",
    "iptables",
    "ip",
    "curl",
    "chromium",
]
OUTSIDE_HOST_SIDE, OUTSIDE_NS_SIDE = "10.44.0.1", "10.44.0.2"
# What destroy leaves on purpose, in /var/cache/gpucluster/<cluster>/ (purge-kept.sh removes it).
KEPT_AFTER_DESTROY = ("packages-left-installed", "node-image-")

pytestmark = pytest.mark.e2e


def sh(*argv: str, check: bool = True, env: dict | None = None, timeout: int = 180) -> subprocess.CompletedProcess:
    return subprocess.run(
        argv, capture_output=True, text=True, check=check, timeout=timeout, env={**os.environ, **(env or {})}
    )


def require_host() -> None:
    assert os.geteuid() == 0, "the end-to-end test needs root (it creates bridges and containers)"
    missing = [tool for tool in REQUIRED_TOOLS if shutil.which(tool) is None]
    assert not missing, f"missing tools {missing}: run `bash .ci/run`, which installs them"


def stand_in_gpus(cluster: str) -> dict[str, tuple[int, int]]:
    """The character devices in the cluster's private device directory, by (major, minor)."""
    found = {}
    for path in Path(f"/run/gpucluster-{cluster}-dev").iterdir():
        info = path.lstat()
        assert stat.S_ISCHR(info.st_mode), f"{path} is not a character device"
        found[path.name] = (os.major(info.st_rdev), os.minor(info.st_rdev))
    return found


def cpu_list(text: str) -> list[int]:
    """A kernel CPU list ('0-1,4') as numbers."""
    cpus = []
    for part in text.strip().split(","):
        first, _, last = part.partition("-")
        cpus += range(int(first), int(last or first) + 1)
    return cpus


def cpusets_are_dealt(config: dict, report: list[str]) -> None:
    """Each node runs on its own share of the host's online CPUs, dealt in turn (wrapping
    around when the host has fewer than the nodes ask for), as many as Slurm's CPUs=."""
    cluster = config["cluster"]
    online = cpu_list(Path("/sys/devices/system/cpu/online").read_text())
    slot = 0
    for node in cluster["nodes"]:
        count = node.get("cpus", 1)
        wanted = sorted({online[(slot + i) % len(online)] for i in range(count)})
        slot += count
        container = f"{cluster['name']}-{node['name']}"
        running = cpu_list(sh("lxc-cgroup", "-n", container, "cpuset.cpus").stdout)
        assert running == wanted, f"{container} runs on CPUs {running}, not {wanted}"
        report.append(f"{container}: cpuset {running} (CPUs={count})")


# A TCP connection to HOST PORT from where it runs: open, refused, or what else happened.
CONNECT = """import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5).close()
    print("open")
except ConnectionRefusedError:
    print("refused")
except OSError as error:
    print(f"other: {error}")
"""


INOTIFY_LIMITS = ("max_user_instances", "max_user_watches")


def host_snapshot() -> dict:
    """What a destroy must restore: /etc, network, firewall, containers, daemons."""
    etc = sorted(
        (str(path), path.lstat().st_size, int(path.lstat().st_mtime))
        for path in Path("/etc").rglob("*")
        if not path.is_symlink() and path.is_file()
    )
    processes = sh("ps", "-eo", "comm=").stdout.split()
    return {
        "etc": etc,
        "links": sorted(os.listdir("/sys/class/net")),
        "dev_nvidia": sorted(str(path) for path in Path("/dev").glob("nvidia*")),
        "addresses": sh("ip", "-o", "-4", "addr", "show").stdout.count("\n"),
        "iptables": sh("iptables-save").stdout.count("\n-A ") if shutil.which("iptables-save") else 0,
        "ip_forward": Path("/proc/sys/net/ipv4/ip_forward").read_text().strip(),
        # The kernel limits the clusters raise (components/files/lib/kernel_limits.sh).
        "inotify": [Path(f"/proc/sys/fs/inotify/{key}").read_text().strip() for key in INOTIFY_LIMITS],
        "containers": sorted(p.name for p in Path("/var/lib/lxc").glob("*")) if Path("/var/lib/lxc").exists() else [],
        "daemons": sorted(p for p in processes if p in {"munged", "slurmctld", "slurmd"}),
        "lxc_cache": Path("/var/cache/lxc/debian").exists(),
        "lxc_cgroups": sorted(str(path) for path in Path("/sys/fs/cgroup").glob("*/lxc*")),
        "state": Path("/var/lib/gpucluster").exists(),
        "shared": Path("/srv/gpucluster").exists(),
    }


def leftovers(cluster: str) -> list[str]:
    """Anything of the cluster still on the host."""
    found = []
    found += [f"container {p.name}" for p in Path("/var/lib/lxc").glob(f"{cluster}-*")]
    found += [f"bridge {name}" for name in os.listdir("/sys/class/net") if name.startswith(f"{cluster}br")]
    rules = sh("iptables-save").stdout
    found += [f"iptables rule {line}" for line in rules.splitlines() if f"gpucluster:{cluster}:" in line]
    for path in (
        f"/var/lib/gpucluster/{cluster}",
        f"/run/gpucluster-{cluster}",
        f"/run/gpucluster-{cluster}-dev",
        f"/srv/gpucluster/{cluster}",
        f"/etc/systemd/system/gpucluster-{cluster}.service",
        f"/etc/systemd/system/multi-user.target.wants/gpucluster-{cluster}.service",
        f"/var/lib/gpucluster-host/ip_forward/users/{cluster}",
        f"/etc/sysctl.d/90-gpucluster-{cluster}.conf",
        f"/var/lib/gpucluster-host/subids/{cluster}-login",
    ):
        if Path(path).is_dir():
            found.append(f"path {path} (holding {sorted(os.listdir(path))})")
        elif Path(path).exists():
            found.append(f"path {path}")
    # A login node's host ids, reserved for root while it exists (its default range for the cluster's name).
    base = login_host_id_base(cluster, LoginConfig(nat_address="10.0.0.1"))
    for name in ("/etc/subuid", "/etc/subgid"):
        lines = Path(name).read_text().splitlines() if Path(name).exists() else []
        found += [f"{name}: {line}" for line in lines if line.startswith(f"root:{base}:")]
    kept = Path(f"/var/cache/gpucluster/{cluster}")
    for entry in kept.glob("*"):
        if entry.name.startswith(KEPT_AFTER_DESTROY):
            continue
        # A cluster of several hosts keeps its images per host: <cluster>/<host>/node-image-*.
        inside = list(entry.iterdir()) if entry.is_dir() else []
        if inside and all(p.name.startswith(KEPT_AFTER_DESTROY) for p in inside):
            continue
        found.append(f"kept {entry}")
    ps = sh("ps", "-eo", "args=").stdout
    found += [
        f"process {line}"
        for line in ps.splitlines()
        # The shared test lock's path holds the same name: a test waiting on it is no leftover.
        if (f"gpucluster-{cluster}" in line or f"gpucluster/{cluster}" in line) and ".lock" not in line
    ]
    return found


def make_outside_namespace() -> None:
    """A network namespace linked to the host by a veth: a client from outside the host."""
    sh("ip", "netns", "add", OUTSIDE_NS)
    sh("ip", "link", "add", OUTSIDE_LINK, "type", "veth", "peer", "name", "e2e-out1")
    sh("ip", "link", "set", "e2e-out1", "netns", OUTSIDE_NS)
    sh("ip", "addr", "add", f"{OUTSIDE_HOST_SIDE}/30", "dev", OUTSIDE_LINK)
    sh("ip", "link", "set", OUTSIDE_LINK, "up")
    ns = ("ip", "netns", "exec", OUTSIDE_NS)
    sh(*ns, "ip", "addr", "add", f"{OUTSIDE_NS_SIDE}/30", "dev", "e2e-out1")
    sh(*ns, "ip", "link", "set", "e2e-out1", "up")
    sh(*ns, "ip", "link", "set", "lo", "up")


def http_run(url: str) -> dict:
    """POST /api/run: one job, as the page's Run button does."""
    with urllib.request.urlopen(urllib.request.Request(f"{url}api/run", data=b""), timeout=30) as response:
        return json.loads(response.read())


def check_cluster(config: dict, outputs: dict, report: list[str]) -> None:
    cluster = config["cluster"]
    nodes = [node["name"] for node in cluster["nodes"]]
    slurm = slurm_env(cluster["name"])
    shared = Path(cluster["host"]["shared_dir"] if "host" in cluster else cluster["hosts"][0]["shared_dir"])

    sinfo = sh("sinfo", env=slurm).stdout
    report.append("$ sinfo\n" + sinfo)
    states = sh("sinfo", "-h", "-N", "-o", "%N %T", env=slurm).stdout.split("\n")
    idle = {line.split()[0] for line in states if line.endswith(" idle")}
    assert idle == set(nodes), f"not every node is idle: {states}"

    hostnames = sh("srun", "--chdir=/tmp", f"-N{len(nodes)}", "hostname", env=slurm).stdout
    report.append(f"$ srun -N{len(nodes)} hostname\n" + hostnames)
    assert sorted(hostnames.split()) == sorted(nodes)

    # A node declaring 2 CPUs (nodes[].cpus) runs 2 tasks at once.
    cpus = cluster["nodes"][0].get("cpus", 1)
    tasks = sh("srun", "--chdir=/tmp", "-N1", f"--ntasks-per-node={cpus}", "hostname", env=slurm).stdout
    report.append(f"$ srun -N1 --ntasks-per-node={cpus} hostname\n" + tasks)
    assert len(tasks.split()) == cpus and len(set(tasks.split())) == 1, tasks

    gpu = sh("srun", "--chdir=/tmp", "--gres=gpu:1", "printenv", "CUDA_VISIBLE_DEVICES", env=slurm).stdout
    report.append("$ srun --gres=gpu:1 printenv CUDA_VISIBLE_DEVICES\n" + gpu)
    assert gpu.strip().isdigit(), f"a GPU job saw CUDA_VISIBLE_DEVICES={gpu!r}"
    device = sh("srun", "--chdir=/tmp", "--gres=gpu:1", "sh", "-c", "ls -l /dev/nvidia[0-9]*", env=slurm).stdout
    report.append("$ srun --gres=gpu:1 ls -l /dev/nvidia[0-9]*\n" + device)
    assert " 195, " in device, f"the GPU device node is not visible in the job: {device!r}"

    refused = sh("srun", "--chdir=/tmp", "--gres=gpu:2", "-n2", "true", env=slurm, check=False, timeout=60)
    report.append("$ srun --gres=gpu:2 -n2 true\n" + refused.stderr)
    assert refused.returncode != 0 and "Requested node configuration is not available" in refused.stderr

    job = shared / "e2e-job.sh"
    job.write_text('#!/bin/sh\necho "job on $(hostname) sees $(ls /dev/nvidia[0-9]* | wc -l) GPU device(s)"\n')
    job.chmod(0o755)
    try:
        ran = sh("srun", f"--chdir={shared}", f"-N{len(nodes)}", str(job), env=slurm).stdout
    finally:
        job.unlink()
    report.append(f"$ srun -N{len(nodes)} {job}\n" + ran)
    assert sorted(line.split()[2] for line in ran.splitlines()) == sorted(nodes)

    web = cluster["web_app"]
    eth0 = sh("ip", "-4", "-o", "addr", "show", "dev", "eth0").stdout.split()[3].split("/")[0]
    for url in (f"http://{eth0}:{web['host_port']}/", outputs["web_url"]):
        body = http_run(url)
        report.append(f"$ curl {url}  (from the host)\n{json.dumps(body)[:400]}\n")
        assert body["returncode"] == 0 and body["mode"] in {"gpu", "cpu-fallback"}
    outside = sh(
        "ip",
        "netns",
        "exec",
        OUTSIDE_NS,
        "curl",
        "-fsS",
        "--max-time",
        "30",
        f"http://{OUTSIDE_HOST_SIDE}:{web['host_port']}/healthz",
    ).stdout
    report.append(f"$ ip netns exec {OUTSIDE_NS} curl http://{OUTSIDE_HOST_SIDE}:{web['host_port']}/healthz\n{outside}")
    assert json.loads(outside) == {"status": "ok"}


def gpu_check_skips_stand_ins(config: dict, report: list[str]) -> None:
    """`./verify.sh STACK --gpu` on the cluster: one Slurm job per node; each node's stand-in
    opens as far as a stand-in goes, the host's other stand-ins do not open in it, and the
    nvidia-smi and CUDA parts say "stand-ins: skipped"."""
    import io

    from components.composition.stack_config import parse_stack_config
    from ops.verify_gpu import verify_gpus

    out = io.StringIO()
    status = verify_gpus(parse_stack_config(config).cluster, out=out)
    report.append("$ ./verify.sh e2e --gpu\n" + out.getvalue())
    print("$ ./verify.sh e2e --gpu\n" + out.getvalue())  # in the failure report too
    assert status == 0, out.getvalue()
    lines = out.getvalue().splitlines()
    nodes = [node["name"] for node in config["cluster"]["nodes"]]
    for node in nodes:
        assert f"{node}: skipped  stand-ins: skipped nvidia-smi -L and the CUDA computation" in "\n".join(lines)
        assert any(line.startswith(f"{node}: ok       another GPU of the host (195:") for line in lines), lines
    assert (
        lines[-1]
        == f"device checks (stand-ins: nvidia-smi and CUDA skipped) passed on {len(nodes)} of {len(nodes)} nodes"
    )


def slurm_env(cluster: str) -> dict:
    """The cluster's Slurm commands on this host: its client (the node image's, in its container)."""
    return cluster_slurm(f"/var/lib/gpucluster/{cluster}")


def changed(actions: dict[str, str]) -> dict[str, str]:
    return {name: action for name, action in actions.items() if action != "same"}


def slurmd_pid(cluster: str, node: str) -> str:
    return sh("lxc-attach", "-n", f"{cluster}-{node}", "--", "pidof", "slurmd").stdout


def slurmctld_pid(cluster: str, placement: str) -> str:
    """slurmctld's pid in its container: c000's, or its own with placement 'host'."""
    container = f"{cluster}-slurmctld" if placement == "host" else f"{cluster}-c000"
    pid = sh("lxc-attach", "-n", container, "--", "pidof", "slurmctld").stdout
    assert pid.strip(), f"no slurmctld in {container}"
    return pid


def kept_image(commands) -> Path:
    """Where destroy keeps the node image of these commands (components/lxc/node_image.py)."""
    image = next(c for c in commands if c.name.endswith("-image-rootfs")).environment
    return Path(image["KEPT_DIR"]) / f"node-image-{image['IMAGE_DIGEST']}"


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_cluster_up_check_reapply_destroy(placement, capsys):
    require_host()
    config = e2e_config(placement)
    cluster = config["cluster"]["name"]
    run = run_program(config, stack=STACK)
    commands = host_commands(run)
    report: list[str] = []

    # A previous run that was killed may have left anything behind: destroy is idempotent.
    teardown()
    before = host_snapshot()
    kept = kept_image(commands)
    # The image a destroy kept (the other placement's run): restored, not built again.
    kept_rootfs = (kept / "rootfs").stat().st_ino if (kept / "gpucluster-image-ready").exists() else None
    try:
        make_outside_namespace()
        started = time.monotonic()
        first = apply(commands)
        bring_up = first.finished(f"{cluster}-health")
        image_step = next(step for step in first.steps if step.name == f"{cluster}-image-rootfs")
        if kept_rootfs:
            assert Path(f"/var/lib/lxc/{cluster}-image/rootfs").stat().st_ino == kept_rootfs, "kept image not restored"
            assert not kept.exists()
        made = "restored" if kept_rootfs else "built, or copied from another test cluster's,"
        report.append(f"node image {made} in {image_step.seconds:.1f} s")
        # The program made the stand-in GPUs, only in the cluster's private device directory.
        assert stand_in_gpus(cluster) == {**{f"nvidia{i}": (195, i) for i in range(5)}, "nvidiactl": (195, 255)}
        check_cluster(config, run.outputs, report)
        cpusets_are_dealt(config, report)
        check_web_page(config, slurm_env(cluster), report, placement)

        # Each container opens only its own GPUs; a rule shadowing the forward is named.
        from tests.test_e2e_isolation import (
            gpus_are_isolated,
            routed_subnet_is_refused,
            shadowed_forward_is_named,
            sources_are_limited,
        )

        gpus_are_isolated(config, report)
        gpu_check_skips_stand_ins(config, report)
        shadowed_forward_is_named(config, report)
        sources_are_limited(config, report)
        routed_subnet_is_refused(config, report)

        # Apply again: every create succeeds and changes nothing.
        config_files = {p: p.read_bytes() for p in Path("/var/lib/lxc").glob(f"{cluster}-*/gpucluster.conf")}
        controller_pid = slurmctld_pid(cluster, placement)
        second = apply(commands)
        assert {p: p.read_bytes() for p in config_files} == config_files
        assert slurmctld_pid(cluster, placement) == controller_pid, "re-apply restarted slurmctld"

        # A reboot, drift, a clone cut before its owner marker (tests/test_e2e_lifecycle.py).
        from tests.test_e2e_lifecycle import drift_is_named, interrupted_clone_recovers, simulate_reboot

        simulate_reboot(config, run.outputs, report)
        drift_is_named(config, report)
        interrupted_clone_recovers(config, commands, report)

        # Leftovers of an interruption (a stopped node, the munged of the host's client gone):
        # apply converges.
        sh("lxc-stop", "-n", f"{cluster}-c002", "-k")
        sh("lxc-attach", "-n", client_container(slurm_env(cluster)), "--", "systemctl", "stop", "munge")
        apply(commands)
        check_cluster(config, run.outputs, [])

        # A change in place: a partition's MaxTime is a reconfigure; nothing else runs or restarts.
        controller_pid = slurmctld_pid(cluster, placement)
        retimed = host_commands(run_program(e2e_config(placement, max_time="1-00:00:00"), stack=STACK))
        _, actions = update(commands, retimed)
        commands = retimed
        # (slurm.conf travels in their environment: its nodes' memory, their share of the host,
        # is known only once the host is measured, after the script store's files are chosen)
        assert changed(actions) == {f"{cluster}-slurm-slurmctld": "update", f"{cluster}-slurm-client": "update"}
        assert slurmctld_pid(cluster, placement) == controller_pid, "a MaxTime change restarted slurmctld"
        partition = sh("scontrol", "show", "partition", "tutorial", env=slurm_env(cluster)).stdout
        assert "MaxTime=1-00:00:00" in partition, partition

        # Grow by one node: that node is created and the controller's config changes; the
        # other nodes are not touched (their slurmd keeps running), but for their memory limit
        # where they already share this machine's CPUs: their share shrinks, applied live.
        grown_config = e2e_config(placement, max_time="1-00:00:00", grow=True)
        slurmd_pids = {node: slurmd_pid(cluster, node) for node in ("c001", "c003")}
        grown = host_commands(run_program(grown_config, stack=STACK))
        growth, actions = update(commands, grown)
        commands = grown
        assert changed(actions) == {
            f"{cluster}-c004-lxc": "create",
            f"{cluster}-c004-slurm-slurmd": "create",
            f"{cluster}-c004-slurm-containers": "create",
            f"{cluster}-slurm-slurmctld": "update",
            f"{cluster}-slurm-client": "update",
            f"{cluster}-host-stand-in-gpus": "update",
            f"{cluster}-host-preflight": "replace",
            f"{cluster}-health": "replace",
            f"{cluster}-boot-unit": "update",
            f"{cluster}-scripts": "update",
            f"{cluster}-host-kernel-limits": "update",
            **{f"{cluster}-{node}-lxc": "update" for node in nodes_whose_share_changes(config, grown_config)},
        }
        assert stand_in_gpus(cluster) == {**{f"nvidia{i}": (195, i) for i in range(7)}, "nvidiactl": (195, 255)}
        assert {node: slurmd_pid(cluster, node) for node in slurmd_pids} == slurmd_pids
        states = sh("sinfo", "-h", "-N", "-o", "%N %T", env=slurm_env(cluster)).stdout.split()
        assert states.count("idle") == 5, states
        report.append(
            f"grow 4 -> 5 nodes: {growth.wall_seconds:.1f} s; changed: "
            + ", ".join(f"{name} ({action})" for name, action in sorted(changed(actions).items()))
        )
        if placement == "container":  # once: containment is the nodes', wherever slurmctld runs
            from tests.test_e2e_containment import jobs_are_contained

            jobs_are_contained(cluster, slurm_env(cluster), report)
        total = time.monotonic() - started
    finally:
        remove_outside_namespace()
        # The grown config's commands are a superset: nothing is missed whatever step failed.
        removal = destroy(host_commands(run_program(e2e_config(placement, grow=True), stack=STACK)))

    assert leftovers(cluster) == []
    assert (kept / "gpucluster-image-ready").exists(), f"destroy did not keep the built image in {kept}"
    after = host_snapshot()
    assert after == before, {key: (before[key], after[key]) for key in before if before[key] != after[key]}

    with capsys.disabled():
        print(f"\n== slurmctld placement: {placement} ==\n" + "\n".join(report))
        print(
            f"bring-up ({len(config['cluster']['nodes'])} nodes, clean host with packages -> "
            f"health gate's first successful srun): {bring_up:.1f} s"
        )
        slowest = sorted(first.steps, key=lambda s: -s.seconds)[:6]
        print("slowest creates: " + ", ".join(f"{s.name} {s.seconds:.1f}s" for s in slowest))
        print(
            f"second apply (no changes): {sum(s.seconds for s in second.steps):.1f} s of command time, "
            f"{len(second.steps)} creates"
        )
        print(f"destroy: {removal.wall_seconds:.1f} s; whole test {total:.0f} s")
