"""End-to-end: an upgrade from the last release's program kills no job.

The `e2e` stack is brought up by the program of the commit the snapshots were recorded from
through the real engine (tests/harness/engine_cluster.py: `pulumi up` with that commit's program
files), with that commit's stack file. A job is started on every node, then the
current program is applied to the same state and the same stack file, as `pulumi up` after
an upgrade of the program would: every command whose script, helpers or inputs changed runs
its create again. Every job must still be RUNNING on its node afterwards, never requeued, on
a container that was not restarted, and then complete. Everything is removed at the end,
also when a step fails.

The stack file stays the release's: a change of the stack file is a change of the cluster,
with its own cost (docs/changes.md; a node's `cpus` ends the jobs on it, the e2e stack's
nodes went from 1 to 2 CPUs since the release). The release's nodes have no memory limit and its
jobs may hold any of the host's memory: c002 and c003 set no `memory_mb`, as the release's stack
file has it, and get their share of the host, measured at the upgrade, taken live. Two nodes
are given a figure: c001's job holds 1.4 GB, more than the 1024 MB (and 1280 MB limit) c001 is
then given: its container keeps its old limit until its next start and the job runs on; and
afterwards the controller's node c000 (2048 MB) is filled to its RealMemory by a job at its
`--mem`: slurmctld keeps answering beside it, the job is not killed, and slurmctld, slurmd and
munged there are the last its OOM killer picks.

With `placement: host` the release ran slurmctld on the host itself; the current program moves
it into a container of its own, with its queue. The jobs that ran across the move end in
slurmctld's records when they end (their slurmstepd reports to the host's address, which
forwards to the new controller while they run), and the forward goes with the cluster.
"""

import copy
import json
import os
import time
from pathlib import Path

import pytest

from components.composition.config import ClusterConfig
from components.composition.node_memory import shares
from components.host.host_size import parse_host_size
from tests.harness.e2e_teardown import STACK, STAND_IN_DIR, remove_stand_in_gpus, teardown
from tests.harness.engine_cluster import State, destroy_state, host_commands, up
from tests.harness.program_harness import run_program
from tests.test_e2e import require_host, sh, slurm_env
from tests.upgrade.snapshot import SNAPSHOTS, release_run, release_stack_config
from tests.upgrade.test_upgrade import ALLOWED_REPLACES

pytestmark = pytest.mark.e2e

SLURM = slurm_env(STACK)  # the current program's host client (the node image's Slurm, in c000)
# The release's host client: the host's own Slurm, with the cluster's munged and slurm.conf on the host.
RELEASE_SLURM = {"SLURM_CONF": f"/var/lib/gpucluster/{STACK}/slurm.conf"}
SHARED = Path("/srv/gpucluster/e2e/shared")  # the stack's shared_dir, bound into every node
FINISH = SHARED / "upgrade-test-finish"
# Where slurmctld runs by placement: the release's e2e stack runs it in node c000; with
# `placement: host` the release ran it on the host and the current program in its own container.
CONTROLLERS = {"container": f"{STACK}-c000", "host": f"{STACK}-slurmctld"}
CONTROLLER = CONTROLLERS["container"]
CLUSTER_DIR = Path(f"/var/lib/gpucluster/{STACK}")
# Where the release recorded the host's ip_forward before turning it on (the current program
# takes it over and restores it when the last cluster goes).
RELEASE_IP_FORWARD = CLUSTER_DIR / "ip_forward.orig"
# The memory two nodes are given with the current program (nodes[].memory_mb, MB); the others
# get their share of the host. c001's job holds more than c001 is given; c000 runs slurmctld and
# is filled to it after the upgrade.
MEMORY_MB = {"c000": 2048, "c001": 1024}
HELD_NODE, HELD_MB = "c001", 1400
# A job that holds HELD_MB MB (each page touched) until the test lets it finish.
HOLD = (
    "import os, time; b = bytearray({mb} * 2**20); b[::4096] = b'x' * len(b[::4096]); "
    "open('/tmp/held-{job}', 'w').close(); "
    "[time.sleep(1) for _ in iter(lambda: os.path.exists('{finish}'), True)]"
)


def make_stand_in_gpus(count: int) -> None:
    """The last release's e2e stack names stand-in GPUs it does not make (its test made them):
    the same devices the current program's stand-in command makes (195:N, nvidiactl 195:255)."""
    STAND_IN_DIR.mkdir(parents=True, exist_ok=True)
    for name, minor in [*((f"nvidia{i}", i) for i in range(count)), ("nvidiactl", 255)]:
        path = STAND_IN_DIR / name
        if not path.exists():
            os.mknod(path, 0o20666, os.makedev(195, minor))
            path.chmod(0o666)


def init_pids(nodes: list[str]) -> dict[str, str]:
    """Each node container's init pid: a restarted container has another one."""
    return {node: sh("lxc-info", "-n", f"{STACK}-{node}", "-p", "-H").stdout.strip() for node in nodes}


def job_states(jobs: dict[str, str], env: dict = SLURM) -> dict[str, str]:
    """Per node: its job's state, node and how often Slurm restarted it (requeued it)."""
    states = {}
    for node, job in jobs.items():
        shown = sh("scontrol", "-o", "show", "job", job, env=env).stdout
        fields = dict(word.split("=", 1) for word in shown.split() if "=" in word)
        states[node] = f"{fields['JobState']} on {fields['NodeList']}, Restarts={fields['Restarts']}"
    return states


def wait_for_states(jobs: dict[str, str], state: str, seconds: int, env: dict = SLURM) -> None:
    all_there = " && ".join(f"scontrol -o show job {job} | grep -q 'JobState={state} '" for job in jobs.values())
    script = f"for _ in $(seq {seconds}); do {all_there} && exit 0; sleep 1; done; exit 1"
    sh("bash", "-c", script, env=env, check=False, timeout=seconds + 30)
    assert job_states(jobs, env) == {node: f"{state} on {node}, Restarts=0" for node in jobs}


def controller_log(jobs: dict[str, str], controller: str = CONTROLLER) -> str:
    """slurmctld's log lines about the jobs and the nodes (what requeued or ended a job)."""
    ids = "|".join(jobs.values())
    pattern = (
        f"JobId=({ids})\\b|requeue|Aborting|unexpectedly rebooted|node_did_resp|state_save|Recovered|slurmctld version"
    )
    found = sh("lxc-attach", "-n", controller, "--", "grep", "-E", pattern, "/var/log/slurm/slurmctld.log", check=False)
    return found.stdout[-8000:] or found.stderr


def container_memory(node: str, key: str) -> int:
    """A node container's memory cgroup value (v1 or v2 name), in bytes (max: -1)."""
    value = sh("lxc-cgroup", "-n", f"{STACK}-{node}", key).stdout.strip()
    return -1 if value == "max" or int(value) >= 2**62 else int(value)


def memory_keys() -> tuple[str, str]:
    """The host's cgroup version's usage and limit keys."""
    if Path("/sys/fs/cgroup/cgroup.controllers").exists():
        return "memory.current", "memory.max"
    return "memory.usage_in_bytes", "memory.limit_in_bytes"


def held_in(node: str, job: str, seconds: int = 90) -> bool:
    """Whether the HOLD job `job` in the node holds its memory (its marker file) within `seconds`."""
    marker = f"/tmp/held-{job}"
    script = f"for _ in $(seq {seconds}); do lxc-attach -n {STACK}-{node} -- test -e {marker} && exit 0; sleep 1; done"
    return sh("bash", "-c", f"{script}; exit 1", check=False, timeout=seconds + 60).returncode == 0


def host_may_lower_oom_scores() -> bool:
    """Whether root here holds CAP_SYS_RESOURCE (bit 24 of its effective capabilities)."""
    effective = next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("CapEff:"))
    return bool(int(effective.split()[1], 16) >> 24 & 1)


def fill_the_controllers_node(capsys) -> None:
    """c000 (slurmctld's node) filled to its RealMemory by a job at its --mem: slurmctld keeps
    answering beside it and the job completes; its daemons are the last its OOM killer picks."""
    scores = sh(
        "lxc-attach",
        "-n",
        CONTROLLER,
        "--",
        "sh",
        "-c",
        "for unit in slurmctld slurmd munge; do "
        'echo "$unit $(cat /proc/$(systemctl show -p MainPID --value $unit)/oom_score_adj)"; done',
    ).stdout.split("\n")
    # Where this host's root may lower an OOM score (CAP_SYS_RESOURCE; not where the host is
    # itself a container that lacks it, and systemd then ignores the drop-ins): -1000.
    score = -1000 if host_may_lower_oom_scores() else 0
    assert [line for line in scores if line] == [f"slurmctld {score}", f"slurmd {score}", f"munge {score}"]
    drop_ins = [f"/etc/systemd/system/{unit}.service.d/gpucluster-oom.conf" for unit in ("slurmd", "munge")]
    shown = sh("lxc-attach", "-n", CONTROLLER, "--", "cat", *drop_ins).stdout
    assert shown.count("OOMScoreAdjust=-1000") == 2
    mem = MEMORY_MB["c000"]
    # The job's own memory is its --mem; Python, the job's shell and their files take some of it.
    fill = "python3 -c " + json.dumps(HOLD.format(mb=mem - 128, job="fill", finish=FINISH))
    FINISH.unlink()
    try:
        submitted = sh(
            *("sbatch", "--parsable", "--chdir=/tmp", "-w", "c000", f"--mem={mem}", "-t", "10", "--wrap", fill),
            env=SLURM,
        )
        job = {"c000": submitted.stdout.strip().split(";")[0]}
        wait_for_states(job, "RUNNING", 60)
        assert held_in("c000", "fill"), "the job never held its memory"
        for _ in range(10):  # slurmctld answers while its node is full
            assert sh("squeue", "-h", "-j", job["c000"], "-o", "%T", env=SLURM, timeout=10).stdout.strip() == "RUNNING"
        with capsys.disabled():
            print(f"\nc000 full: {container_memory('c000', memory_keys()[0]) >> 20} MB held")
    finally:
        FINISH.touch()
    wait_for_states(job, "COMPLETED", 60)


def containers_came_in_place(nodes: list[str], capsys) -> None:
    """Jobs in container images, on by default since the release, came into the running nodes
    (their image is the release's: lib/containers_addon.sh): Enroot with its helpers'
    capabilities on every node, and Pyxis in srun and slurmd. A registry that does not answer
    fails the job with Enroot's message, through Pyxis, and the node stays up for the next job."""
    for node in nodes:
        version = sh("lxc-attach", "-n", f"{STACK}-{node}", "--", "enroot", "version").stdout.strip()
        caps = sh("lxc-attach", "-n", f"{STACK}-{node}", "--", "getcap", "/usr/local/bin/enroot-aufs2ovlfs").stdout
        granted = set(caps.split()[-1].split("=")[0].split(",")) if caps.strip() else set()
        assert version == "4.1.2" and granted == {"cap_sys_admin", "cap_mknod"}, (node, version, caps)
    done = sh(
        *("srun", "-w", nodes[1], "-t", "2", "--container-image=127.0.0.1:5999#nothing:1", "true"),
        env=SLURM,
        check=False,
        timeout=120,
    )
    with capsys.disabled():
        print(f"\nsrun --container-image from a registry that does not answer, after the upgrade:\n{done.stderr}")
    assert done.returncode != 0 and "pyxis" in done.stderr and "5999" in done.stderr, done.stderr
    deadline = time.monotonic() + 60  # the job's epilog (Pyxis') first: `completing`
    while (state := sh("sinfo", "-h", "-n", nodes[1], "-o", "%T", env=SLURM).stdout.strip()) == "completing":
        assert time.monotonic() < deadline, f"{nodes[1]} still completing the failed container job"
        time.sleep(1)
    assert state == "idle", f"{nodes[1]} is {state} after the failed container job"


def measured_shares(state: State, config: dict) -> dict[str, int]:
    """The RealMemory of the nodes without memory_mb: their share of the host as the engine's
    state keeps its measure."""
    (entry,) = [e for e in state.resources.values() if e.command.name == f"{STACK}-host-size"]
    cluster = ClusterConfig.model_validate(config["cluster"])
    return shares(cluster, cluster.cluster_hosts[0], parse_host_size(entry.stdout))


def placed(placement: str):
    """The release's stack file with slurmctld where `placement` says (its own: in c000)."""
    if placement == "container":
        return None
    return lambda text: text.replace("controller: {placement: container, node: c000}", "controller: {placement: host}")


def controller_forwards() -> list[str]:
    """The host's rules that have an old controller address answer for the moved one."""
    return [line for line in sh("iptables-save").stdout.splitlines() if f"gpucluster:{STACK}:ctld-move:" in line]


@pytest.mark.parametrize("placement", ["container", "host"])
def test_an_upgrade_from_the_last_release_keeps_every_job_running(placement, capsys):
    require_host()
    commit = json.loads((SNAPSHOTS / f"{STACK}.json").read_text())["commit"]
    release = host_commands(release_run(commit, STACK, placed(placement)), revision=commit)
    config = release_stack_config(commit, STACK, placed(placement))
    assert config["cluster"]["slurm"]["controller"]["placement"] == placement
    sized = copy.deepcopy(config)
    for node in sized["cluster"]["nodes"]:
        if node["name"] in MEMORY_MB:
            node["memory_mb"] = MEMORY_MB[node["name"]]
    current = host_commands(run_program(sized, stack=STACK))
    nodes = [node["name"] for node in config["cluster"]["nodes"]]
    usage_key, limit_key = memory_keys()
    teardown()
    state = State()
    jobs: dict[str, str] = {}
    try:
        make_stand_in_gpus(len(nodes))
        up(state, release)
        FINISH.unlink(missing_ok=True)
        for node in nodes:
            wait = f"while [ ! -e {FINISH} ]; do sleep 1; done"
            if node == HELD_NODE:  # the release schedules no memory: no --mem
                wait = "python3 -c " + json.dumps(HOLD.format(mb=HELD_MB, job=node, finish=FINISH))
            submitted = sh(
                *("sbatch", "--parsable", "--chdir=/tmp", "-N1", "-n1", "-w", node, "-t", "20", "--wrap", wait),
                env=RELEASE_SLURM,
            )
            jobs[node] = submitted.stdout.strip().split(";")[0]
        wait_for_states(jobs, "RUNNING", 60, RELEASE_SLURM)
        assert held_in(HELD_NODE, HELD_NODE), "the job never held its memory"
        assert container_memory(HELD_NODE, usage_key) > HELD_MB * 2**20
        assert container_memory(HELD_NODE, limit_key) == -1, "the release's nodes have no memory limit"
        before = init_pids(nodes)

        _, actions = up(state, current)
        ran = {name: action for name, action in actions.items() if action != "same"}
        logs = {
            e.command.name: e.stderr
            for e in state.resources.values()
            if e.command.name.endswith(("-lxc", "-slurmd", "-slurmctld"))
        }
        with capsys.disabled():
            print(f"\nupgrade {commit[:7]} -> current: {ran}")
            for name, text in sorted(logs.items()):
                print(f"--- {name} (stderr)\n{text}")
        unexplained = {
            name: action
            for name, action in ran.items()
            if action == "delete" or (action == "replace" and not name.endswith(tuple(ALLOWED_REPLACES)))
        }
        assert unexplained == {}
        assert {f"{STACK}-{node}-lxc" for node in nodes} <= set(ran), "the node containers' inputs changed"
        assert init_pids(nodes) == before, "a node container was restarted"
        assert job_states(jobs) == {node: f"RUNNING on {node}, Restarts=0" for node in nodes}
        # c001 holds more than its new limit: the limit waits for its next start, and says so.
        lxc_log = logs[f"{STACK}-{HELD_NODE}-lxc"]
        assert f"{STACK}-{HELD_NODE}: holds " in lxc_log and "more than its new memory limit of 1280 MB" in lxc_log
        assert container_memory(HELD_NODE, limit_key) == -1
        # The others took theirs live: c002 its share of the host as measured (the state keeps the
        # figure), its RealMemory in slurm.conf plus a node's 256 MB; c000 its memory_mb plus that
        # (and 512 more, slurmctld's).
        share = measured_shares(state, sized)["c002"]
        node_line = sh("scontrol", "-o", "show", "node", "c002", env=SLURM).stdout
        assert f" RealMemory={share} " in node_line, node_line
        with capsys.disabled():
            print(f"\nc002's share of this host: RealMemory={share} MB")
        assert share > 1024, "more than the old default's 1024 MB per 2 CPUs"
        assert container_memory("c002", limit_key) == (share + 256) * 2**20
        controller_margin = 512 if placement == "container" else 0
        assert container_memory("c000", limit_key) == (2048 + 256 + controller_margin) * 2**20
        if placement == "host":
            # slurmctld left the host: its address answers for the new one while these jobs run.
            forwards = controller_forwards()
            with capsys.disabled():
                print("\n".join(["", "forwards while the jobs run:", *forwards]))
            assert len(forwards) == 4, forwards  # DNAT (from the nodes, from the host), SNAT, accept

        FINISH.touch()
        # Their ends are recorded: each job's slurmstepd reports to the controller it started with.
        let_finish = time.monotonic()
        wait_for_states(jobs, "COMPLETED", 60)
        with capsys.disabled():
            print(f"\nthe jobs' ends recorded {time.monotonic() - let_finish:.1f} s after they were let finish")
        containers_came_in_place(nodes, capsys)
        if placement == "container":
            fill_the_controllers_node(capsys)
        destroy_state(state)
        assert not RELEASE_IP_FORWARD.exists(), "the release's record of ip_forward outlived the cluster"
        assert controller_forwards() == []
        # The forwards' records go with the cluster's directory (the stand-in GPUs are the
        # test's, the shared folder holds its finish mark: both go in the finally below).
        assert not CLUSTER_DIR.exists(), sorted(p.name for p in CLUSTER_DIR.iterdir())
    except BaseException:
        if jobs:
            with capsys.disabled():
                print(f"--- slurmctld's log about jobs {jobs}\n{controller_log(jobs, CONTROLLERS[placement])}")
        raise
    finally:
        FINISH.unlink(missing_ok=True)
        try:
            destroy_state(state)
        finally:
            teardown()
            remove_stand_in_gpus()
