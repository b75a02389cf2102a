"""Benchmark: bring-up of N nodes on this machine, by the program's own commands, against the
tutorial's way of making nodes.

Run as root (it creates containers, bridges and daemons, and removes them again):

    venv/bin/pip install -r tests/requirements-benchmark.txt      # matplotlib, for the plot
    venv/bin/python tests/benchmark_bringup.py                     # 4 and 16 nodes
    venv/bin/python tests/benchmark_bringup.py --nodes 4 8 16 --baseline-nodes 4

What it does, in one run:
  1. Records the program's commands under mocks for a `bench` cluster of each size (one
     stand-in GPU, made by the program, shared by the nodes; slurmctld in c000; no web app) and runs the cluster's
     own preflight for the largest one: it refuses to start, changing nothing, when the
     cluster's bridge names or subnets, or its container names, are taken by something else.
  2. For every size: a bring-up with no kept node image (the image is built with
     `lxc-create -t debian` from LXC's download cache), destroy (which keeps the image), a
     bring-up that restores the kept image, destroy. For the smallest size, between them: a
     bring-up whose image is copied from another cluster's kept image of the same definition
     (a second cluster on the host). A measured build that copied instead stops the run. Bring-ups run the harness the
     end-to-end test uses (tests/harness/command_executor.py): dependency order, at most as
     many steps at once as ./up.sh has `pulumi up` run (tools/parallelism.py: nodes + 16), or
     $PULUMI_PARALLEL where set (PULUMI_PARALLEL=8: the CLI's own default on two cores).
  3. The tutorial-style baseline: one `lxc-create -t debian -- -r bookworm --packages=...`
     (the node image's packages) per node, one after the other, as the tutorial's
     install_cuda_node loop does (its boot, SSH and Slurm setup are not counted, so the
     baseline is a lower bound). Measured once for the largest baseline size; the time at n
     nodes is when the n-th create ended. Each container is removed right after its create,
     outside the timed part.
  4. Prints per phase and total, the ratios, writes the figures as JSON and a plot (PNG), and
     purges the kept image it made (unless --keep-image).

Phases are spans of the resources' steps on the update's clock (0 = the first step starts):
host (preflight, packages, shared dir, bridges, the munge key and the host's munged), image,
containers, controller (slurmctld), slurmd registration, health gate (sinfo + srun on every
node and a GPU job), boot unit. `ready` is when the health gate passed: every node answered srun.
CPU seconds are counted in cgroups (v1 cpuacct): the benchmark's own (every script and tool
the bring-up runs) and the cluster's containers, so other work on the host is left out.
"""

import argparse
import contextlib
import dataclasses
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]  # the repository root, when run as a script

from components.lxc.node_image import IMAGE_PACKAGES  # noqa: E402
from components.slurm.config import CONTROLLER_DAEMON_MEMORY_MB, NODE_DAEMON_MEMORY_MB  # noqa: E402
from tests.harness import engine_cluster, ssh_hosts  # noqa: E402
from tests.harness.command_executor import (  # noqa: E402
    HostCommand,
    State,
    Timeline,
    apply,
    cli_parallel,
    destroy,
    destroy_state,
    host_commands,
    up,
)
from tests.harness.e2e_teardown import run_here  # noqa: E402
from tests.harness.engine import cli_dir  # noqa: E402
from tests.harness.engine_cpu import EngineCpu  # noqa: E402
from tests.harness.program_harness import ROOT, run_program  # noqa: E402
from tools import parallelism  # noqa: E402

CLUSTER = "bench"
STACK = "bench"
NAT_PREFIX, CLUSTER_PREFIX = "10.61.3", "10.61.5"
KEEP_DIR = Path("/var/cache/gpucluster") / CLUSTER
# Where the copy run stages bench's image as another cluster's kept one.
OTHER_KEEP_DIR = Path("/var/cache/gpucluster") / f"{CLUSTER}-other"
# The benchmark's own package cache and, for --cold, its own LXC download cache (LXC_CACHE_PATH):
# emptied when a run needs them empty, removed at the end; other clusters' caches are left alone.
PACKAGE_CACHE = Path("/var/cache/gpucluster") / f"{CLUSTER}-node-packages"
COLD_LXC_CACHE = Path("/var/cache/gpucluster") / f"{CLUSTER}-lxc-cache"
BASELINE_PREFIX = "benchtut-"
MAX_NODES = 64  # bounded: 64 containers at most, one /24 per bridge
HOST_RESERVED_MB = 1024  # what the preflight's memory check leaves to the host (host/files/preflight.sh)
MIN_NODE_MEMORY_MB = 64  # the config's least nodes[].memory_mb
PHASES = ("host", "image", "containers", "controller", "slurmd", "health", "boot unit")
OUT = ROOT / "docs" / "benchmark"
CPUACCT = Path("/sys/fs/cgroup/cpuacct")
# The second host of the two-host comparison: a network namespace with its own sshd, bridges,
# LXC path, state and run directories (tests/harness/ssh_hosts.py), reached over SSH.
SECOND_HOST = ssh_hosts.SshHost("bh2", "10.62.0.2", 22, netns="bench-h2", site_address="10.62.0.1")
SECOND_NAT, SECOND_CLUSTER = "10.63.3", "10.63.5"
SECOND_DIRS = {
    "state_dir": "/var/lib/gpucluster-bench-h2",
    "run_dir": "/run/gpucluster-bench-h2-run",
    "lxc_dir": "/var/lib/lxc-bench-h2",
}
SECRET = "benchSshKey"
OWN_CGROUP = CPUACCT / "gpucluster-benchmark"


def node_memory_mb(nodes: int) -> int:
    """Each node's nodes[].memory_mb: 256, or less where that many nodes would not fit this
    host's memory by the preflight's count (a node's limit is that plus its daemons' share, and
    1024 MB stay with the host): 64 nodes on a 24 GB host get about 100 MB each, which a bench
    node's jobs (hostname, a GPU check) never come near."""
    total_mb = int(Path("/proc/meminfo").read_text().split()[1]) // 1024
    # c000 runs slurmctld: its container keeps CONTROLLER_DAEMON_MEMORY_MB more.
    fits = (total_mb - HOST_RESERVED_MB - CONTROLLER_DAEMON_MEMORY_MB) // nodes - NODE_DAEMON_MEMORY_MB
    if fits < MIN_NODE_MEMORY_MB:
        sys.exit(f"{nodes} nodes do not fit this host's {total_mb} MB (the preflight's memory check)")
    return min(256, fits)


def bench_config(nodes: int) -> dict:
    """A `bench` cluster of `nodes` nodes sharing one stand-in GPU, slurmctld in c000."""
    memory_mb = node_memory_mb(nodes)
    return {
        "cluster": {
            "name": CLUSTER,
            "host": {"shared_dir": f"/srv/gpucluster/{CLUSTER}/shared"},
            "network": {
                "nat_bridge": {"name": f"{CLUSTER}br0", "address": f"{NAT_PREFIX}.1/24"},
                "cluster_bridge": {"name": f"{CLUSTER}br1", "subnet": f"{CLUSTER_PREFIX}.0/24"},
            },
            # c000 owns the stand-in GPU; the others have none (a GPU belongs to one node).
            "gpu": {"stand_in": {"count": 1}},
            "nodes": [
                {
                    "name": f"c{i:03d}",
                    "nat_address": f"{NAT_PREFIX}.{10 + i}",
                    "cluster_address": f"{CLUSTER_PREFIX}.{1 + i}",
                    "gpus": 0 if i else 1,
                    # Small nodes: many fit this host's memory (the preflight adds their limits up).
                    "memory_mb": memory_mb,
                }
                for i in range(nodes)
            ],
            "slurm": {
                "controller": {"placement": "container", "node": "c000"},
                "partitions": [{"name": "bench", "default": True, "oversubscribe": "YES"}],
            },
        }
    }


def own_package_cache(commands: list[HostCommand]) -> list[HostCommand]:
    """The image built from the benchmark's own package cache, which it empties and removes,
    instead of the one this host's clusters share."""
    return [
        dataclasses.replace(c, environment={**c.environment, "PACKAGE_CACHE": str(PACKAGE_CACHE)})
        if "PACKAGE_CACHE" in c.environment
        else c
        for c in commands
    ]


def commands_for(nodes: int) -> list[HostCommand]:
    return own_package_cache(host_commands(run_program(bench_config(nodes), stack=STACK)))


def two_host_config(nodes: int, host_key: str) -> dict:
    """The same cluster on two hosts: the first half of the nodes here, the rest on the second
    host (over SSH), each host with its own bridges, subnets and stand-in GPU."""
    config = bench_config(nodes)
    cluster = config["cluster"]
    shared = cluster.pop("host")["shared_dir"]
    network, gpu = cluster.pop("network"), cluster.pop("gpu")
    second_network = {
        "nat_bridge": {"name": f"{CLUSTER}br0", "address": f"{SECOND_NAT}.1/24"},
        "cluster_bridge": {"name": f"{CLUSTER}br1", "subnet": f"{SECOND_CLUSTER}.0/24"},
    }
    connection = {
        "kind": "ssh",
        "address": SECOND_HOST.address,
        "port": SECOND_HOST.port,
        "host_key": host_key,
        "private_key_secret": SECRET,
    }
    cluster["hosts"] = [
        {"name": "h1", "address": SECOND_HOST.site_address, "shared_dir": shared, "network": network, "gpu": gpu},
        {"name": "h2", "connection": connection, "address": SECOND_HOST.address, "shared_dir": shared,
         "network": second_network, "gpu": gpu, **SECOND_DIRS},
    ]  # fmt: skip
    for i, node in enumerate(cluster["nodes"]):
        node["host"] = "h1" if i < nodes // 2 else "h2"
        if node["host"] == "h2":
            node["nat_address"], node["cluster_address"] = f"{SECOND_NAT}.{10 + i}", f"{SECOND_CLUSTER}.{1 + i}"
    return config


def phase_of(name: str) -> str:
    step = name.removeprefix(f"{CLUSTER}-").removeprefix("h1-").removeprefix("h2-")
    if step.startswith(("host-", "bridges-", "slurm-munge-key", "slurm-client", "munge-key", "client")):
        return "host"
    if step in ("routes", "ssh-ready", "sshd-accept-env", "scripts", "scripts-dir"):
        return "host"
    if step.startswith("image-"):
        return "image"
    if step.endswith("-slurm-slurmd"):
        return "slurmd"
    if step.endswith("-lxc"):
        return "containers"
    if step.startswith("slurm-"):
        return "controller"
    if step == "health":
        return "health"
    if step.startswith("boot-"):
        return "boot unit"
    raise ValueError(f"no phase for step {name}")


def phases(timeline: Timeline) -> dict:
    """Per phase: start and end (seconds after the first step started), and its span."""
    origin = min(step.started for step in timeline.steps)
    found: dict[str, dict] = {}
    for step in timeline.steps:
        start, end = step.started - origin, step.started + step.seconds - origin
        phase = found.setdefault(phase_of(step.name), {"start": start, "end": end})
        phase["start"], phase["end"] = min(phase["start"], start), max(phase["end"], end)
    for phase in found.values():
        phase["seconds"] = phase["end"] - phase["start"]
    return {name: found[name] for name in PHASES if name in found}


def steps_of(timeline: Timeline) -> list[dict]:
    origin = min(step.started for step in timeline.steps)
    return [
        {
            "name": step.name,
            "phase": phase_of(step.name),
            "start": round(step.started - origin, 3),
            "seconds": round(step.seconds, 3),
        }
        for step in sorted(timeline.steps, key=lambda s: s.started)
    ]


def sh(*argv: str, check: bool = True, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, check=check, timeout=timeout)


def require_host() -> None:
    if os.geteuid() != 0:
        sys.exit("the bring-up benchmark needs root (it creates bridges and containers)")
    missing = [
        tool for tool in ("lxc-create", "lxc-copy", "debootstrap", "srun", "slurmctld") if not shutil.which(tool)
    ]
    if missing:
        sys.exit(f"missing tools {missing}: install tests/debian-packages.txt (bash .ci/run does)")


def preflight(largest: list[HostCommand], baseline_nodes: int) -> None:
    """The cluster's own preflight (read-only) for the largest size, and free baseline names."""
    # The preflight checks the stand-in GPUs it is given, so they are made for it, then removed.
    check = [
        c
        for c in largest
        if c.name in (f"{CLUSTER}-scripts", f"{CLUSTER}-host-stand-in-gpus", f"{CLUSTER}-host-preflight")
    ]
    try:
        apply(check)
    except AssertionError as error:
        sys.exit(f"refusing to run: the cluster's preflight failed\n{error}")
    finally:
        destroy([c for c in check if c.name.endswith(("-stand-in-gpus", "-scripts"))])
    taken = [name for name in baseline_names(baseline_nodes) if Path("/var/lib/lxc", name).exists()]
    if taken:
        sys.exit(
            f"refusing to run: LXC containers {taken} exist (the baseline's names); remove them or pick another host"
        )


def baseline_names(nodes: int) -> list[str]:
    return [f"{BASELINE_PREFIX}c{i:03d}" for i in range(nodes)]


def cpu_busy() -> float:
    """Seconds of CPU the whole host has spent busy since boot (all processes, all cores)."""
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, Path("/proc/stat").read_text().split()[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def cgroup_seconds(path: Path) -> float:
    return int((path / "cpuacct.usage").read_text()) / 1e9


def enter_own_cgroup() -> bool:
    """Run in a cpuacct cgroup of our own (cgroup v1), so the CPU of every script and tool the
    bring-up runs, and of the host daemons it starts, is counted apart from other work on the
    host; the containers count in their own LXC cgroups."""
    if not (CPUACCT / "cpuacct.usage").exists():
        return False
    OWN_CGROUP.mkdir(exist_ok=True)
    (OWN_CGROUP / "cgroup.procs").write_text(str(os.getpid()))
    return True


def leave_own_cgroup() -> None:
    if not OWN_CGROUP.exists():
        return
    for pid in [os.getpid(), *(OWN_CGROUP / "cgroup.procs").read_text().split()]:
        with contextlib.suppress(ProcessLookupError):
            (CPUACCT / "cgroup.procs").write_text(str(pid))
    OWN_CGROUP.rmdir()


def own_cpu() -> dict[str, float]:
    """CPU seconds of this bring-up so far, by where they were spent: on the host (our cgroup:
    the scripts, lxc-copy, lxc-start, lxc-attach, the host's daemons, and the containers' LXC
    monitors) and in the cluster's containers (their boots and daemons). The containers'
    cgroups go when they stop: read before destroy."""
    host = [OWN_CGROUP, *CPUACCT.glob(f"lxc.monitor.{CLUSTER}-*")]
    containers = CPUACCT.glob(f"lxc.payload.{CLUSTER}-*")
    return {
        "host": sum(cgroup_seconds(group) for group in host if group.exists()),
        "containers": sum(cgroup_seconds(group) for group in containers if group.exists()),
    }


def cpu_spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {where: after[where] - before.get(where, 0.0) for where in after}


def steps_at_once(nodes: int) -> int:
    """What ./up.sh has `pulumi up` run at once for this cluster (tools/parallelism.py), unless
    $PULUMI_PARALLEL says otherwise (then the harness and the engine both read it)."""
    return parallelism.env_parallel(os.environ) or parallelism.for_config(bench_config(nodes))[0]


def bring_up(nodes: int, commands: list[HostCommand], counted: bool) -> dict:
    """Up, then destroy; the figures of the up and the destroy's time."""
    parallel = cli_parallel(steps_at_once(nodes))
    state = State()
    load = float(Path("/proc/loadavg").read_text().split()[0])
    busy, own = cpu_busy(), own_cpu() if counted else {}
    state_entries = []
    try:
        timeline, _ = up(state, commands, parallel=parallel)
        state_entries = list(state.resources.values())
        busy, own = cpu_busy() - busy, cpu_spent(own, own_cpu()) if counted else None
    finally:
        load_after = float(Path("/proc/loadavg").read_text().split()[0])
        started = time.monotonic()
        destroy_state(state, parallel=parallel)
        destroyed = time.monotonic() - started
    found = phases(timeline)
    total = sum(own.values()) if own is not None else None
    # The image script's own account of its build (its phases), when it built one.
    image_log = [
        line
        for entry in state_entries
        if entry.command.name.endswith("-image-rootfs")
        for line in entry.stderr.splitlines()
        if line.startswith(("node image:", "node image copied"))
    ]
    return {
        "nodes": nodes,
        "parallel": parallel,
        "total": round(timeline.wall_seconds, 2),
        "ready": round(timeline.finished(f"{CLUSTER}-health"), 2),
        "phases": {name: {k: round(v, 2) for k, v in phase.items()} for name, phase in found.items()},
        "destroy": round(destroyed, 2),
        "cpu_seconds": round(total, 1) if total is not None else None,
        # Per node: the host-side work (scripts, lxc-copy/start/attach) and the containers' own.
        "cpu_per_node": round(total / nodes, 3) if total is not None else None,
        "cpu_host_per_node": round(own["host"] / nodes, 3) if own is not None else None,
        "cpu_containers_per_node": round(own["containers"] / nodes, 3) if own is not None else None,
        "host_cpu_seconds": round(busy, 1),
        "load_before": load,
        "load_after": load_after,
        "image_log": image_log,
        "steps": steps_of(timeline),
    }


# The CLI's CPU profile (`--cli-profile`): the cumulative seconds of the calls a step's work
# goes to, by what they are (pkg/backend, pkg/resource/deploy of the pinned CLI).
PROFILE_PARTS = {
    "checkpoints": "backend.(*SnapshotManager).saveSnapshot",
    "checkpoint backups": "backend/diy.backupTarget",
    "display and events": "pkg/v3/backend/display.",
    "step executor": "resource/deploy.(*stepExecutor).worker",
    "gRPC served (program, provider)": "google.golang.org/grpc.(*Server).handleStream",
    "garbage collection": "runtime.gcBgMarkWorker",
}


def _seconds(value: str) -> float:
    for unit, scale in (("ms", 1e-3), ("us", 1e-6), ("µs", 1e-6), ("s", 1.0), ("min", 60.0)):
        if value.endswith(unit):
            return float(value.removesuffix(unit)) * scale
    return float(value)


def cli_profile(prefix: Path) -> dict | None:
    """The CLI's CPU profile (`--profiling PREFIX` wrote PREFIX.PID.cpu), read with `go tool
    pprof`: its total and the cumulative seconds of PROFILE_PARTS; the top of it is kept beside."""
    profiles = sorted(prefix.parent.glob(f"{prefix.name}.*.cpu"))
    cli = cli_dir()
    if not profiles or cli is None or not shutil.which("go"):
        return None
    top = sh("go", "tool", "pprof", "-top", "-cum", "-nodecount=400", str(cli / "pulumi"), str(profiles[-1])).stdout
    (prefix.parent / f"{prefix.name}-top.txt").write_text(top)
    total = re.search(r"Total samples = (\S+)", top)
    parts = {}
    for label, name in PROFILE_PARTS.items():
        cums = [_seconds(line.split()[3]) for line in top.splitlines()[6:] if name in line and len(line.split()) >= 6]
        parts[label] = round(max(cums, default=0.0), 2)
    return {"total": round(_seconds(total.group(1)), 2) if total else None, "cumulative": parts}


def in_flight_peak(events: list[dict]) -> int:
    """The most command steps running at once in an engine run, by its event log's order."""
    running = peak = 0
    for event in sorted(events, key=lambda e: e.get("sequence", 0)):
        pre, done = event.get("resourcePreEvent"), event.get("resOutputsEvent")
        meta = (pre or done or {}).get("metadata") or {}
        if not meta.get("type", "").startswith("command:"):
            continue
        running += 1 if pre else -1
        peak = max(peak, running)
    return peak


def engine_bring_up(nodes: int, out: Path, profile: bool = False) -> dict:
    """The same cluster (node image kept) through the real engine: `pulumi up`, then `pulumi
    destroy`, as a user's ./up.sh and ./down.sh run them (the same steps at once). The engine's
    share: its wall time beside the span of the commands' steps in its event log (whole seconds)
    and beside the harness's bring-up of the same commands just before. The CPU seconds of the
    engine's own processes (tests/harness/engine_cpu.py), the host's CPU use, and the most
    command steps in flight against the limit (below it: nothing waited in the engine's queue)."""
    program = engine_cluster.host_commands(run_program(bench_config(nodes), stack=STACK))
    state = engine_cluster.State()
    args = ("--profiling", str(out / f"cli-{nodes}")) if profile else ()
    started, busy = time.monotonic(), cpu_busy()
    try:
        with EngineCpu(Path(tempfile.gettempdir()) / f"gpucluster-engine-{STACK}-") as engine_cpu:
            timeline, _ = engine_cluster.up(state, program, args=args)
        wall, busy = time.monotonic() - started, cpu_busy() - busy
        peak = in_flight_peak(state.last.events)
        exported = state.engine.export()
        (out / f"state-{nodes}.json").write_text(exported)  # what the state holds, to look into
        entries = json.loads(exported)["deployment"].get("resources") or []
        resources = len(entries)
        largest = max((len(json.dumps(entry)), entry["urn"].rsplit("::", 1)[1]) for entry in entries)
        started = time.monotonic()
        engine_cluster.up(state, program)
        unchanged = time.monotonic() - started
    finally:
        started = time.monotonic()
        engine_cluster.destroy_state(state)
        destroyed = time.monotonic() - started
    return {
        "nodes": nodes,
        "parallel": steps_at_once(nodes),
        "steps_in_flight_peak": peak,
        "pulumi_up": round(wall, 2),
        "commands_span": round(timeline.wall_seconds, 2),
        "ready": round(timeline.finished(f"{CLUSTER}-health"), 2),
        "pulumi_destroy": round(destroyed, 2),
        "pulumi_up_unchanged": round(unchanged, 2),
        # The engine's own share: its wall time less the span of the commands it ran.
        "engine_share": round(wall - timeline.wall_seconds, 2),
        "engine_cpu_seconds": engine_cpu.by_role(),
        "host_cpu_busy": round(busy / (wall * (os.cpu_count() or 1)), 2),
        "cli_profile": cli_profile(out / f"cli-{nodes}") if profile else None,
        "resources": resources,
        "state_bytes": len(exported.encode()),
        "largest_resource": {"name": largest[1], "bytes": largest[0]},
    }


def engine_report(runs: list[dict], harness: list[dict]) -> str:
    kept = {run["nodes"]: run for run in harness if run["kind"] == "re-up"}
    lines = ["through the real engine (pulumi up / pulumi destroy, node image kept):"]
    for run in runs:
        line = (
            f"  {run['nodes']:>3} nodes: pulumi up {run['pulumi_up']:.1f} s (its commands span "
            f"{run['commands_span']:.0f} s, ready at {run['ready']:.0f} s of them); "
            f"pulumi destroy {run['pulumi_destroy']:.1f} s"
        )
        if "state_bytes" in run:
            line += (
                f"; no-change up {run['pulumi_up_unchanged']:.1f} s; the engine's share "
                f"{run['engine_share']:.1f} s; state {run['state_bytes'] / 1e6:.2f} MB for "
                f"{run['resources']} resources ({run['state_bytes'] / run['resources'] / 1e3:.1f} KB each; the "
                f"largest {run['largest_resource']['name']}, {run['largest_resource']['bytes'] / 1e3:.1f} KB)"
            )
        if run["nodes"] in kept:
            same = kept[run["nodes"]]
            line += (
                f"; the harness's bring-up of the same commands: ready {same['ready']:.1f} s, total "
                f"{same['total']:.1f} s: the engine adds {run['pulumi_up'] - same['total']:.1f} s "
                f"({run['pulumi_up'] / same['total']:.2f}x; destroy {run['pulumi_destroy'] / same['destroy']:.2f}x)"
            )
        lines.append(line)
        if "engine_cpu_seconds" in run:
            cpu = ", ".join(f"{role} {seconds:.1f}" for role, seconds in sorted(run["engine_cpu_seconds"].items()))
            lines.append(
                f"      {run['parallel']} steps at once, at most {run['steps_in_flight_peak']} command steps in "
                f"flight (below the limit: none waited in the queue); the host's CPU {run['host_cpu_busy']:.0%} "
                f"busy; the engine's CPU seconds: {cpu}"
            )
        if run.get("cli_profile"):
            parts = ", ".join(f"{k} {v:.1f} s" for k, v in run["cli_profile"]["cumulative"].items())
            lines.append(f"      the CLI's CPU profile: {run['cli_profile']['total']} s sampled; cumulative: {parts}")
    return "\n".join(lines)


def baseline(nodes: int) -> dict:
    """The tutorial's per-node install, one after the other; each container removed (untimed)."""
    packages = ",".join(IMAGE_PACKAGES)
    ended, elapsed = [], 0.0
    for name in baseline_names(nodes):
        started = time.monotonic()
        try:
            sh("lxc-create", "-n", name, "-t", "debian", "--", "-r", "bookworm", f"--packages={packages}", timeout=900)
            elapsed += time.monotonic() - started
            ended.append(round(elapsed, 2))
            print(f"  tutorial-style lxc-create {name}: {ended[-1] - (ended[-2] if len(ended) > 1 else 0):.1f} s")
        finally:
            sh("lxc-destroy", "-n", name, "-f", check=False)
    return {"packages": packages, "cumulative": ended}


def compare_hosts(nodes: int, counted: bool) -> list[dict]:
    """1 host x `nodes` against 2 hosts x `nodes`/2, both with their node images kept. On this
    one machine both hosts share its CPUs, so this measures what a second host costs (SSH,
    routes, a second image and bridges), not the speed-up of a second machine."""
    hosts = {SECOND_HOST.address: SECOND_HOST}
    server = ssh_hosts.start(SECOND_HOST)
    two = own_package_cache(
        host_commands(
            run_program(two_host_config(nodes, server["host_key"]), stack=STACK, secrets={SECRET: server["client_key"]})
        )
    )
    try:
        one = commands_for(nodes)
        print(f"two hosts x {nodes // 2} nodes: building both hosts' node images (not measured) ...")
        bring_up(nodes, two, counted)
        print(f"one host x {nodes} nodes, the node image kept ...")
        single = {"kind": "hosts", "label": f"1 host x {nodes} nodes", "hosts": 1, **bring_up(nodes, one, counted)}
        print(f"two hosts x {nodes // 2} nodes, the node images kept ...")
        double = {
            "kind": "hosts",
            "label": f"2 hosts x {nodes // 2} nodes",
            "hosts": 2,
            **bring_up(nodes, two, counted),
        }
        return [single, double]
    finally:
        destroy(run_here(two, hosts))
        ssh_hosts.remove(SECOND_HOST)
        for directory in SECOND_DIRS.values():
            sh("rmdir", directory, check=False)


def empty_package_cache(remove: bool = False) -> None:
    shutil.rmtree(PACKAGE_CACHE, ignore_errors=True)
    Path(f"{PACKAGE_CACHE}.lock").unlink(missing_ok=True)
    if not remove:
        PACKAGE_CACHE.mkdir(parents=True)


def cold_runs(nodes: int, commands: list[HostCommand], counted: bool) -> list[dict]:
    """Bring-ups whose image is built with an empty LXC download cache (debootstrap downloads
    the Debian base): with an empty package cache (the first build on a host), then with the
    package cache that build filled (a rebuild after LXC's cache went)."""
    runs = []
    empty_package_cache()
    os.environ["LXC_CACHE_PATH"] = str(COLD_LXC_CACHE)
    try:
        for kind, label in (("cold", "LXC cache empty"), ("cold-packages", "LXC cache empty, packages kept")):
            purge_kept_image()
            shutil.rmtree(COLD_LXC_CACHE, ignore_errors=True)
            print(f"bring-up, {nodes} nodes, the node image built, {label} ...")
            run = built_not_copied(bring_up(nodes, commands, counted))
            runs.append({"kind": kind, "label": f"{nodes} nodes, {label}", **run})
    finally:
        del os.environ["LXC_CACHE_PATH"]
        shutil.rmtree(COLD_LXC_CACHE, ignore_errors=True)
    return runs


def copied_run(nodes: int, commands: list[HostCommand], counted: bool) -> dict:
    """A second cluster of this host: bench's kept image handed to another cluster name, so the
    bring-up copies it (as from any other cluster's image of the same definition)."""
    (kept,) = KEEP_DIR.glob("node-image-*")
    other = OTHER_KEEP_DIR / kept.name
    other.parent.mkdir(parents=True, exist_ok=True)
    kept.rename(other)
    try:
        run = bring_up(nodes, commands, counted)
    finally:
        shutil.rmtree(OTHER_KEEP_DIR, ignore_errors=True)
    if not any("copied" in line for line in run["image_log"]):
        sys.exit(f"the image was not copied from {other}: {run['image_log']}")
    return {"kind": "copied", "label": f"{nodes} nodes, image copied from another cluster", **run}


def built_not_copied(run: dict) -> dict:
    """A run that had to build its image: another cluster's image of the same definition on
    this host would have been copied instead, and the figure would not be a build's."""
    copied = [line for line in run["image_log"] if "copied" in line]
    if copied:
        sys.exit(f"{copied[0]}: purge that cluster's kept image (./purge-kept.sh) to measure a build")
    return run


def purge_kept_image() -> None:
    """Remove the node images kept for the bench cluster (purge-kept.sh, the documented way)."""
    if KEEP_DIR.exists():
        sh(str(ROOT / "purge-kept.sh"), CLUSTER)


def machine() -> dict:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    memory = int(Path("/proc/meminfo").read_text().split()[1]) // 1024 // 1024
    release = dict(line.split("=", 1) for line in Path("/etc/os-release").read_text().splitlines() if "=" in line)
    return {
        "cpus": os.cpu_count(),
        "cpu": cpu,
        "memory_gib": memory,
        "os": release.get("PRETTY_NAME", "").strip('"'),
        "kernel": platform.release(),
        "lxc": sh("lxc-create", "--version", check=False).stdout.strip(),
        "slurm": sh("slurmctld", "-V", check=False).stdout.strip(),
    }


KINDS = {
    "cold": "node image built, LXC download cache empty",
    "cold-packages": "node image built, LXC download cache empty, package cache kept",
    "first": "node image built",
    "copied": "node image copied from another cluster's",
    "re-up": "node image kept by a destroy before",
}


def report(figures: dict) -> str:
    runs, base = figures["runs"], figures.get("baseline")
    lines = [
        "phase spans in seconds (first start to last end of each phase's steps); ready: the health gate passed;",
        "cpu s: CPU seconds of the bring-up's own processes and containers; host cpu: the whole host's, other work",
        "included",
        f"{'run':<24}{'nodes':>6}" + "".join(f"{p:>11}" for p in PHASES) + f"{'ready':>8}{'total':>8}{'cpu s':>8}"
        f"{'host cpu':>9}",
    ]
    for run in runs:
        cells = "".join(f"{run['phases'][p]['seconds']:>11.1f}" if p in run["phases"] else f"{'-':>11}" for p in PHASES)
        cpu = run["cpu_seconds"] if run["cpu_seconds"] is not None else "-"
        lines.append(
            f"{run['label']:<24}{run['nodes']:>6}{cells}{run['ready']:>8.1f}{run['total']:>8.1f}{cpu:>8}"
            f"{run['host_cpu_seconds']:>9.1f}"
        )
    lines.append("")
    if base:
        lines.append(
            f"tutorial-style: one lxc-create -t debian --packages={base['packages']} per node, one after the "
            "other (no boot, no Slurm):"
        )
        shown = {run["nodes"] for run in runs} | {len(base["cumulative"])}
        lines += [f"  {n:>3} nodes: {s:.1f} s" for n, s in enumerate(base["cumulative"], start=1) if n in shown]
    for kind, what in KINDS.items():
        by_size = {run["nodes"]: run for run in runs if run["kind"] == kind}
        for nodes, run in sorted(by_size.items()):
            line = f"{nodes:>3} nodes, {what}: ready {run['ready']:.1f} s (destroy {run['destroy']:.1f} s)"
            if base and nodes <= len(base["cumulative"]):
                line += f"; tutorial-style takes {base['cumulative'][nodes - 1] / run['ready']:.1f}x as long"
            lines.append(line)
        sizes = sorted(by_size)
        if len(sizes) > 1:
            small, large = by_size[sizes[0]], by_size[sizes[-1]]
            lines.append(
                f"    scale-out, {what}: {large['nodes']} nodes take {large['ready'] / small['ready']:.2f}x "
                f"the time of {small['nodes']}"
            )
            floor = cpu_floor(small, large, figures["machine"]["cpus"])
            if kind == "re-up" and floor:
                lines.append(
                    f"    floor, {what}: {small['ready']:.1f} s ({small['nodes']} nodes) + "
                    f"{large['nodes'] - small['nodes']} x {large['cpu_per_node']:.2f} CPU s / "
                    f"{figures['machine']['cpus']} cores = {floor:.1f} s; {large['nodes']} nodes take "
                    f"{large['ready'] / floor:.2f}x the floor"
                )
    for run in runs:
        if run.get("image_log"):
            lines.append(
                f"image, {run['label']}: " + "; ".join(r.removeprefix("node image: ") for r in run["image_log"])
            )
    for run in runs:
        if run.get("cpu_per_node") is not None:
            lines.append(
                f"cpu per node, {run['label']}: {run['cpu_per_node']:.2f} s (host side "
                f"{run['cpu_host_per_node']:.2f}, in the container {run['cpu_containers_per_node']:.2f}); "
                f"load {run['load_before']:.2f} before, {run.get('load_after', float('nan')):.2f} after"
            )
    compared = {run["hosts"]: run for run in runs if run["kind"] == "hosts"}
    if len(compared) == 2:
        one, two = compared[1], compared[2]
        lines.append(
            f"{one['nodes']} nodes, node images kept: 1 host {one['ready']:.1f} s, 2 hosts "
            f"(over SSH, sharing this machine's CPUs) {two['ready']:.1f} s: {two['ready'] / one['ready']:.2f}x"
        )
    return "\n".join(lines)


def cpu_floor(small: dict, large: dict, cores: int) -> float | None:
    """The least time `large` can take on this host: the smaller run's time, plus the CPU of
    the extra nodes (at the larger run's CPU per node) spread over every core."""
    if large.get("cpu_per_node") is None:
        return None
    return small["ready"] + (large["nodes"] - small["nodes"]) * large["cpu_per_node"] / cores


def _series(run: dict) -> str:
    """The bar series of a run: one host with a kept image is a re-up, whatever its size."""
    if run["kind"] == "hosts":
        return "re-up" if run["hosts"] == 1 else "two-hosts"
    return run["kind"]


def plot(figures: dict, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no plot: matplotlib is missing (venv/bin/pip install -r tests/requirements-benchmark.txt)")
        return
    runs, base = figures["runs"], figures.get("baseline")
    colors = dict(zip(PHASES, plt.get_cmap("tab10").colors, strict=False))
    fig, (gantt, bars) = plt.subplots(1, 2, figsize=(14, 5), gridspec_kw={"width_ratios": [3, 2]})

    # One thin lane per phase inside each run's row: phases overlap (containers boot while the
    # controller starts), so each keeps its own band.
    lane = 0.8 / len(PHASES)
    for row, run in enumerate(runs):
        for index, phase in enumerate(PHASES):
            span = run["phases"].get(phase)
            if span:
                y = row - 0.4 + lane * (index + 0.5)
                label = phase if row == 0 else None
                gantt.barh(
                    y, max(span["seconds"], 0.05), left=span["start"], color=colors[phase], height=lane, label=label
                )
        gantt.text(run["ready"], row, f" ready {run['ready']:.1f} s", va="center", fontsize=8)
    gantt.set_yticks(range(len(runs)), [run["label"] for run in runs], fontsize=8)
    gantt.invert_yaxis()
    gantt.set_xlabel("seconds since the update started")
    gantt.set_title("bring-up phases (this program)")
    gantt.legend(fontsize=7, loc="lower right")
    gantt.set_xlim(0, max(run["total"] for run in runs) * 1.25)

    sizes = sorted({run["nodes"] for run in runs})
    series = [(f"this program, {what}", kind) for kind, what in KINDS.items()]
    if any(run["kind"] == "hosts" for run in runs):
        series.append(("this program, 2 hosts (one over SSH), images kept", "two-hosts"))
    groups = len(series) + bool(base)
    width = 0.8 / groups

    def offset(i: int) -> float:
        return (i - (groups - 1) / 2) * width

    for i, (label, kind) in enumerate(series):
        found = {run["nodes"]: run["ready"] for run in runs if _series(run) == kind}
        xs = [x + offset(i) for x, n in enumerate(sizes) if n in found]
        bars.bar(xs, [found[n] for n in sizes if n in found], width, label=label)
        for x, n in zip(xs, [n for n in sizes if n in found], strict=True):
            bars.text(x, found[n], f"{found[n]:.1f}", ha="center", va="bottom", fontsize=7)
    if base:
        i = len(series)
        shown = [n for n in sizes if n <= len(base["cumulative"])]
        xs = [x + offset(i) for x, n in enumerate(sizes) if n in shown]
        seconds = [base["cumulative"][n - 1] for n in shown]
        bars.bar(xs, seconds, width, label="tutorial-style lxc-create per node, sequential", color="tab:gray")
        for x, value in zip(xs, seconds, strict=True):
            bars.text(x, value, f"{value:.0f}", ha="center", va="bottom", fontsize=7)
    bars.set_xticks(range(len(sizes)), [f"{n} nodes" for n in sizes])
    bars.set_ylabel("seconds until every node serves (ready)")
    bars.set_title("bring-up against the tutorial's per-node install")
    bars.legend(fontsize=7)

    host = figures["machine"]
    fig.suptitle(
        f"{figures['date']}: {host['cpus']} cores ({host['cpu']}), {host['memory_gib']} GiB, {host['os']}, "
        f"LXC {host['lxc']}, {host['slurm']}",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[4, 16], help="cluster sizes (default: 4 16)")
    parser.add_argument(
        "--baseline-nodes",
        type=int,
        default=None,
        help="tutorial-style nodes to create (default: the largest size; 0: none)",
    )
    parser.add_argument(
        "--hosts-nodes",
        type=int,
        default=8,
        help="compare 1 host x N nodes with 2 hosts x N/2 (default 8; 0: no comparison)",
    )
    parser.add_argument("--no-first", action="store_true", help="measure only bring-ups with the kept image")
    parser.add_argument(
        "--cold",
        action="store_true",
        help="first, the smallest size with an empty LXC download cache (the benchmark's own): once with an "
        "empty package cache, once with the one that run filled",
    )
    parser.add_argument(
        "--engine",
        action="store_true",
        help="after each size's kept-image bring-up, the same through the real engine (pulumi up / destroy)",
    )
    parser.add_argument(
        "--cli-profile",
        action="store_true",
        help="with --engine: the CLI's CPU profile of each up (pulumi --profiling; read with `go tool pprof`)",
    )
    parser.add_argument("--keep-image", action="store_true", help="leave the kept node image in place at the end")
    parser.add_argument(
        "--out",
        type=Path,
        default=OUT,
        help=f"folder of bringup.json and bringup.png (default {OUT.relative_to(ROOT)})",
    )
    parser.add_argument("--plot-only", action="store_true", help="redraw the plot from the folder's bringup.json")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.plot_only:
        figures = json.loads((args.out / "bringup.json").read_text())
        print(report(figures))
        plot(figures, args.out / "bringup.png")
        return

    sizes = sorted(set(args.nodes))
    if sizes[0] < 1 or sizes[-1] > MAX_NODES:
        sys.exit(f"--nodes: 1 to {MAX_NODES}")
    if args.hosts_nodes and not (2 <= args.hosts_nodes <= MAX_NODES and args.hosts_nodes % 2 == 0):
        sys.exit(f"--hosts-nodes: an even number, 2 to {MAX_NODES}, or 0")
    baseline_nodes = sizes[-1] if args.baseline_nodes is None else args.baseline_nodes
    if not 0 <= baseline_nodes <= MAX_NODES:
        sys.exit(f"--baseline-nodes: 0 to {MAX_NODES}")
    require_host()
    commands = {n: commands_for(n) for n in sizes}
    largest = commands[sizes[-1]]

    figures: dict = {
        "date": datetime.date.today().isoformat(),
        "machine": machine(),
        "command": " ".join(["tests/benchmark_bringup.py", *sys.argv[1:]]),
        "runs": [],
    }
    counted = enter_own_cgroup()
    try:
        preflight(largest, baseline_nodes)
        destroy(largest)  # whatever an interrupted run of this benchmark left (its own only)
        if args.cold:
            figures["runs"] += cold_runs(sizes[0], commands[sizes[0]], counted)
        for n in sizes:
            if not args.no_first:
                empty_package_cache()
                purge_kept_image()
                print(f"bring-up, {n} nodes, the node image built ...")
                run = built_not_copied(bring_up(n, commands[n], counted))
                figures["runs"].append({"kind": "first", "label": f"{n} nodes, image built", **run})
                if n == sizes[0]:
                    print(f"bring-up, {n} nodes, the node image copied from another cluster's ...")
                    figures["runs"].append(copied_run(n, commands[n], counted))
            print(f"bring-up, {n} nodes, the node image kept by the destroy before ...")
            if not any(KEEP_DIR.glob("node-image-*")):
                bring_up(n, commands[n], counted)  # --no-first: build it, unmeasured
            figures["runs"].append(
                {"kind": "re-up", "label": f"{n} nodes, image kept", **bring_up(n, commands[n], counted)}
            )
            if args.engine:
                print(f"bring-up, {n} nodes, the node image kept, through the real engine ...")
                figures.setdefault("engine", []).append(engine_bring_up(n, args.out, args.cli_profile))
        if args.hosts_nodes:
            figures["runs"] += compare_hosts(args.hosts_nodes, counted)
        if baseline_nodes:
            print(f"tutorial-style baseline, {baseline_nodes} nodes ...")
            figures["baseline"] = baseline(baseline_nodes)
    finally:
        destroy(largest)
        if args.hosts_nodes:
            destroy(commands_for(args.hosts_nodes))
        for name in baseline_names(baseline_nodes):
            if Path("/var/lib/lxc", name).exists():
                sh("lxc-destroy", "-n", name, "-f", check=False)
        if not args.keep_image:
            purge_kept_image()
        empty_package_cache(remove=True)
        shutil.rmtree(COLD_LXC_CACHE, ignore_errors=True)
        shutil.rmtree(OTHER_KEEP_DIR, ignore_errors=True)
        leave_own_cgroup()

    (args.out / "bringup.json").write_text(json.dumps(figures, indent=1) + "\n")
    print(report(figures))
    if figures.get("engine"):
        print(engine_report(figures["engine"], figures["runs"]))
    plot(figures, args.out / "bringup.png")
    print(f"wrote {args.out / 'bringup.json'} and {args.out / 'bringup.png'}")


if __name__ == "__main__":
    main()
