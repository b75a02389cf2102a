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
nodes went from 1 to 2 CPUs since the release).
"""

import json
import os
from pathlib import Path

import pytest

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
CONTROLLER = f"{STACK}-c000"  # the release's e2e stack runs slurmctld in node c000
# Where the release recorded the host's ip_forward before turning it on (the current program
# takes it over and restores it when the last cluster goes).
RELEASE_IP_FORWARD = Path(f"/var/lib/gpucluster/{STACK}/ip_forward.orig")


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


def controller_log(jobs: dict[str, str]) -> str:
    """slurmctld's log lines about the jobs and the nodes (what requeued or ended a job)."""
    ids = "|".join(jobs.values())
    pattern = (
        f"JobId=({ids})\\b|requeue|Aborting|unexpectedly rebooted|node_did_resp|state_save|Recovered|slurmctld version"
    )
    found = sh("lxc-attach", "-n", CONTROLLER, "--", "grep", "-E", pattern, "/var/log/slurm/slurmctld.log", check=False)
    return found.stdout[-8000:] or found.stderr


def test_an_upgrade_from_the_last_release_keeps_every_job_running(capsys):
    require_host()
    commit = json.loads((SNAPSHOTS / f"{STACK}.json").read_text())["commit"]
    release = host_commands(release_run(commit, STACK), revision=commit)
    config = release_stack_config(commit, STACK)
    current = host_commands(run_program(config, stack=STACK))
    nodes = [node["name"] for node in config["cluster"]["nodes"]]
    teardown()
    state = State()
    jobs: dict[str, str] = {}
    try:
        make_stand_in_gpus(len(nodes))
        up(state, release)
        FINISH.unlink(missing_ok=True)
        for node in nodes:
            wait = f"while [ ! -e {FINISH} ]; do sleep 1; done"
            submitted = sh(
                *("sbatch", "--parsable", "--chdir=/tmp", "-N1", "-n1", "-w", node, "-t", "20", "--wrap", wait),
                env=RELEASE_SLURM,
            )
            jobs[node] = submitted.stdout.strip().split(";")[0]
        wait_for_states(jobs, "RUNNING", 60, RELEASE_SLURM)
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

        FINISH.touch()
        wait_for_states(jobs, "COMPLETED", 60)
        destroy_state(state)
        assert not RELEASE_IP_FORWARD.exists(), "the release's record of ip_forward outlived the cluster"
    except BaseException:
        if jobs:
            with capsys.disabled():
                print(f"--- slurmctld's log about jobs {jobs}\n{controller_log(jobs)}")
        raise
    finally:
        FINISH.unlink(missing_ok=True)
        try:
            destroy_state(state)
        finally:
            teardown()
            remove_stand_in_gpus()
