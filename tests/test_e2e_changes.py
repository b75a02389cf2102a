"""End-to-end: every row of the change table (docs/changes.md), applied to a running cluster.

One cluster (the `e2e` stack) is brought up once by the real engine, then each change is
applied by `pulumi up` on the same stack (tests/harness/engine_cluster.py). After each change the
test checks what ran, the end state (sinfo, srun, curl) and that nothing of the old side is
left. It ends with a second cluster beside the first, destroyed while the first keeps
running, then destroys everything and compares the host with its state before.
"""

import contextlib
import copy
import time
from pathlib import Path

import pytest

from tests.harness.e2e_teardown import STACK, e2e_config, remove_outside_namespace, remove_stand_in_gpus, teardown
from tests.harness.engine_cluster import (
    CommandFailedError,
    State,
    destroy,
    destroy_state,
    host_commands,
    up,
)
from tests.harness.imitation_check import harness_actions, harness_deletes_first
from tests.harness.program_harness import nodes_whose_share_changes, run_program
from tests.test_e2e import (
    check_cluster,
    host_snapshot,
    leftovers,
    make_outside_namespace,
    require_host,
    sh,
    slurm_env,
    slurmd_pid,
)

pytestmark = pytest.mark.e2e

CLUSTER = "e2e"
SLURM = slurm_env(CLUSTER)


def program(config: dict):
    run = run_program(config, stack=STACK)
    return run, host_commands(run)


def changed(actions: dict[str, str]) -> dict[str, str]:
    return {name: action for name, action in actions.items() if action != "same"}


def node_states() -> dict[str, str]:
    lines = sh("sinfo", "-h", "-N", "-o", "%N %T", env=SLURM).stdout.split("\n")
    return dict(line.split() for line in lines if line.strip())


def containers(prefix: str) -> list[str]:
    return sorted(p.name for p in Path("/var/lib/lxc").glob(f"{prefix}*") if (p / "config").exists())


def slurmctld_processes() -> list[str]:
    """Every slurmctld of this cluster, on the host or in any of its containers (a node's, or
    its own with placement 'host')."""
    found = [
        line
        for line in sh("ps", "-eo", "pid=,args=").stdout.splitlines()
        if "slurmctld" in line.split()[1] and "-f /var/lib/gpucluster/e2e/" in line
    ]
    for name in containers(f"{CLUSTER}-"):
        if sh("lxc-attach", "-n", name, "--", "pidof", "slurmctld", check=False).returncode == 0:
            found.append(f"in {name}")
    return found


def job_state(job: str) -> str:
    return sh("squeue", "-h", "-j", job, "-o", "%T", env=SLURM).stdout.strip()


def wait_for(condition: str, seconds: int = 60) -> None:
    """Poll a shell condition (with the cluster's SLURM_CONF) until it holds."""
    loop = f"for _ in $(seq {seconds * 2}); do {condition} && exit 0; sleep 0.5; done; exit 1"
    sh("bash", "-c", loop, env=SLURM, timeout=seconds + 30)


def curl(port: int, path: str = "/healthz") -> str:
    host = sh("ip", "-4", "-o", "addr", "show", "dev", "eth0").stdout.split()[3].split("/")[0]
    return sh("curl", "-fsS", "--max-time", "20", f"http://{host}:{port}{path}", check=False).stdout


class Replay:
    """Applies configs one after another against one state, recording a row per change. Each
    change is also planned by the imitation the AWS e2e tests still use
    (tests/harness/command_executor.py): its actions and the old copies it deletes first must
    be the engine's."""

    def __init__(self):
        self.state = State()
        self.rows: list[str] = []
        self.outputs: dict = {}
        self.applied: dict | None = None

    def apply(self, what: str, config: dict, compare: bool = True) -> dict[str, str]:
        run, commands = program(config)
        started = time.monotonic()
        _, actions = up(self.state, commands)
        seconds = time.monotonic() - started
        self.outputs = run.outputs
        ran = ", ".join(f"{name} ({action})" for name, action in sorted(changed(actions).items())) or "nothing"
        self.rows.append(f"| {what} | {seconds:.1f} s | {ran} |")
        if compare:
            planned = harness_actions(self.applied, config, STACK)
            assert changed(actions) == changed(planned), (
                what,
                "engine",
                changed(actions),
                "imitation",
                changed(planned),
            )
            if self.applied is not None:
                first = self.state.last.deleted_first()
                assert first == harness_deletes_first(self.applied, config, STACK), (what, first)
        self.applied = config
        # The boot unit's host-state.env lists what the cluster owns: it follows most changes;
        # the script store ships the files of any changed script or long parameter first.
        assert changed(actions).get("e2e-scripts", "update") in ("create", "update"), (what, actions)
        return {
            name: action for name, action in changed(actions).items() if name not in ("e2e-boot-unit", "e2e-scripts")
        }


def base_config() -> dict:
    return e2e_config("container")


def test_every_change_table_row_on_a_running_cluster(capsys):
    require_host()
    teardown()
    before = host_snapshot()
    replay = Replay()
    second_state = State()
    config = base_config()
    try:
        make_outside_namespace()
        replay.apply("bring-up (4 nodes)", config)
        check_cluster(config, replay.outputs, [])
        # What the scripts report of the host is what the state holds: a refresh changes nothing.
        replay.state.engine.refresh("--expect-no-changes")

        # Grow while a user's job runs: the update neither waits for it nor disturbs it.
        job = sh("sbatch", "--parsable", "-w", "c001", "--chdir=/tmp", "--wrap", "sleep 300", env=SLURM).stdout.strip()
        wait_for(f"squeue -h -j {job} -o %T | grep -q RUNNING")
        grown = copy.deepcopy(config)
        grown["cluster"]["nodes"].append({"name": "c004", "nat_address": "10.43.3.6", "cluster_address": "10.43.5.5"})
        grown["cluster"]["gpu"]["stand_in"]["count"] = 6
        actions = replay.apply("add a node while a job runs on c001", grown)
        assert actions == {
            "e2e-c004-lxc": "create",
            "e2e-c004-slurm-slurmd": "create",
            "e2e-c004-slurm-containers": "create",
            "e2e-slurm-slurmctld": "update",
            "e2e-slurm-client": "update",
            "e2e-host-preflight": "replace",
            "e2e-health": "replace",
            "e2e-host-stand-in-gpus": "update",
            "e2e-host-kernel-limits": "update",
            # Where the nodes already share this machine's CPUs, their memory shares shrink (live).
            **{f"e2e-{node}-lxc": "update" for node in nodes_whose_share_changes(config, grown)},
        }
        assert sh("squeue", "-h", "-j", job, "-o", "%T", env=SLURM).stdout.strip() == "RUNNING", "the job died"
        assert node_states()["c001"] in {"allocated", "mixed"} and node_states()["c004"] == "idle"
        sh("scancel", job, env=SLURM)

        # Remove the node again: its container and slurmd go, the others stay.
        pids = {node: slurmd_pid(CLUSTER, node) for node in ("c001", "c002")}
        actions = replay.apply("remove a node", config)
        assert actions["e2e-c004-lxc"] == "delete" and actions["e2e-c004-slurm-slurmd"] == "delete"
        assert "e2e-c004" not in containers("e2e-c")
        assert {node: slurmd_pid(CLUSTER, node) for node in pids} == pids
        assert sorted(node_states()) == ["c000", "c001", "c002", "c003"]

        # A node's address: its container config is rewritten and the container restarted.
        moved = copy.deepcopy(config)
        moved["cluster"]["nodes"][3]["nat_address"] = "10.43.3.9"
        actions = replay.apply("a node's address", moved)
        # slurm.conf names the node's address too: the controller reconfigures.
        assert actions == {"e2e-c003-lxc": "update", "e2e-slurm-slurmctld": "update", "e2e-slurm-client": "update"}
        assert " 10.43.3.9/" in sh("lxc-attach", "-n", "e2e-c003", "--", "ip", "-4", "-o", "addr").stdout
        wait_for('[ "$(sinfo -h -n c003 -o %T)" = idle ]')
        config = moved

        # The app's port: its settings and the forward follow; the host port stays.
        web = copy.deepcopy(config)
        web["cluster"]["web_app"]["port"] = 8081
        actions = replay.apply("web_app.port", web)
        assert actions == {"e2e-web-service": "update", "e2e-fwd-7000-rules": "update"}, actions
        assert '"ok"' in curl(7000)
        config = web

        # The host port: the forward's rules are replaced, the old port no longer answers.
        ported = copy.deepcopy(config)
        ported["cluster"]["web_app"]["host_port"] = 7001
        actions = replay.apply("web_app.host_port", ported)
        assert actions["e2e-fwd-7001-rules"] == "create" and actions["e2e-fwd-7000-rules"] == "delete", actions
        assert '"ok"' in curl(7001) and curl(7000) == ""
        assert "--dport 7000" not in sh("iptables-save").stdout
        config = ported

        # Rename the app: one web container, under the new name, at the same address.
        renamed = copy.deepcopy(config)
        renamed["cluster"]["web_app"]["name"] = "portal"
        actions = replay.apply("web_app.name", renamed)
        assert actions["e2e-web-container-lxc"] == "update" and actions["e2e-web-service"] == "update", actions
        assert containers("e2e-web") == [] and containers("e2e-portal") == ["e2e-portal"]
        assert '"ok"' in curl(7001)
        config = renamed

        # Move the controller: container c000 -> host -> container c001; one slurmctld at a time,
        # and the queue (a held job) moves with it.
        held = sh("sbatch", "--parsable", "--hold", "--chdir=/tmp", "--wrap", "true", env=SLURM).stdout.strip()
        for placement, where in (({"placement": "host"}, "host"), ({"placement": "container", "node": "c001"}, "c001")):
            move = copy.deepcopy(config)
            move["cluster"]["slurm"]["controller"] = placement
            replay.apply(f"controller to {where}", move)
            running = slurmctld_processes()
            assert len(running) == 1, running
            # placement 'host': slurmctld's own container on the host
            assert running == [f"in {CLUSTER}-slurmctld" if where == "host" else f"in {CLUSTER}-c001"], running
            assert set(node_states().values()) == {"idle"}, node_states()
            assert job_state(held) == "PENDING", f"the queue was lost moving the controller to {where}"
            config = move
        check_cluster(config, replay.outputs, [])

        # The image: rebuilt, every container replaced, and what lived inside set up again.
        rebuilt = copy.deepcopy(config)
        rebuilt["cluster"]["image"] = {"extra_packages": ["less"]}
        actions = replay.apply("image.extra_packages (kills running jobs)", rebuilt)
        assert actions["e2e-image-rootfs"] == "replace"
        for node in ("c000", "c001", "c002", "c003"):
            assert actions[f"e2e-{node}-lxc"] == "replace" and actions[f"e2e-{node}-slurm-slurmd"] == "replace"
        assert actions["e2e-slurm-slurmctld"] == "replace" and actions["e2e-web-service"] == "replace"
        assert sh("lxc-attach", "-n", "e2e-c002", "--", "test", "-x", "/usr/bin/less", check=False).returncode == 0
        assert containers("e2e-") == ["e2e-c000", "e2e-c001", "e2e-c002", "e2e-c003", "e2e-image", "e2e-portal"]
        assert job_state(held) == "PENDING", "the queue was lost replacing the controller's container"
        sh("scancel", held, env=SLURM)
        config = rebuilt
        check_cluster(config, replay.outputs, [])

        # A bridge's name: the bridge is replaced (the old one first) and every container is
        # restarted onto the new one.
        rebridged = copy.deepcopy(config)
        rebridged["cluster"]["network"]["nat_bridge"]["name"] = "e2ebr2"
        actions = replay.apply("network.nat_bridge.name (restarts every container)", rebridged)
        assert actions["e2e-bridges-nat"] == "replace"
        assert all(actions[f"e2e-{node}-lxc"] == "update" for node in ("c000", "c001", "c002", "c003"))
        assert not Path("/sys/class/net/e2ebr0").exists() and Path("/sys/class/net/e2ebr2").exists()
        wait_for('[ "$(sinfo -h -o %T | sort -u)" = idle ]')
        config = rebridged
        check_cluster(config, replay.outputs, [])

        # A changed name or state_dir is another cluster: refused before anything changes.
        moved_state = {"host": {"state_dir": "/var/lib/e2e-moved", "shared_dir": "/srv/gpucluster/e2e/shared"}}
        for what, change in (("name", {"name": "e2x"}), ("host.state_dir", moved_state)):
            other = copy.deepcopy(config)
            other["cluster"].update(change)
            if what == "name":  # the stand-ins live in the cluster's own device directory
                other["cluster"]["web_app"]["gpus"] = ["/run/gpucluster-e2x-dev/nvidia4"]
            _, commands = program(other)
            with pytest.raises(CommandFailedError) as refused:
                up(replay.state, commands)
            message = str(refused.value)
            assert "preflight" in message and ("renamed the cluster" in message or "host.state_dir" in message), message
            replay.rows.append(f"| {what} | refused by the preflight | nothing |")
            assert containers("e2x") == [] and not Path("/var/lib/e2e-moved").exists()
            # The renamed cluster's stand-in GPUs come before its preflight: going back to the
            # old config deletes them; nothing of the cluster changes.
            # (The engine's state holds what the refused update made: no plan of the imitation's.)
            back = replay.apply(f"back from the refused {what}", config, compare=False)
            assert set(back.values()) <= {"delete", "create", "replace", "update"}, back
            assert not [name for name in back if name.startswith("e2e-c") or "slurm" in name], back
        assert not Path("/run/gpucluster-e2x-dev").exists()
        check_cluster(config, replay.outputs, [])

        # A second cluster beside this one: applied, then destroyed; this one is untouched.
        pids = {node: slurmd_pid(CLUSTER, node) for node in ("c000", "c003")}
        second = second_cluster_config()
        up(second_state, program(second)[1])
        assert sh("sinfo", "-h", "-o", "%T", env=slurm_env("e2f")).stdout.strip() == "idle"
        destroy_state(second_state)
        assert leftovers("e2f") == []
        assert {node: slurmd_pid(CLUSTER, node) for node in pids} == pids
        check_cluster(config, replay.outputs, [])
        replay.rows.append("| a second cluster beside this one, destroyed | - | nothing of this one |")
    finally:
        remove_outside_namespace()
        for state in (second_state, replay.state):
            with contextlib.suppress(CommandFailedError):
                destroy_state(state)
        destroy(program(second_cluster_config())[1])
        teardown()
        remove_stand_in_gpus()

    assert leftovers(CLUSTER) == [] and leftovers("e2f") == []
    after = host_snapshot()
    assert after == before, {key: (before[key], after[key]) for key in before if before[key] != after[key]}
    with capsys.disabled():
        print("\n| change | time | what ran |\n|---|---|---|\n" + "\n".join(replay.rows))


def second_cluster_config() -> dict:
    """A one-node cluster with its own name, bridges, subnets and no web app."""
    config = copy.deepcopy(base_config())
    cluster = config["cluster"]
    cluster["name"] = "e2f"
    cluster["host"] = {"shared_dir": "/srv/gpucluster/e2f/shared"}
    cluster["network"] = {
        "nat_bridge": {"name": "e2fbr0", "address": "10.46.3.1/24"},
        "cluster_bridge": {"name": "e2fbr1", "subnet": "10.46.5.0/24"},
    }
    cluster["gpu"] = {"stand_in": {"count": 1}}
    cluster["nodes"] = [{"name": "d000", "nat_address": "10.46.3.2", "cluster_address": "10.46.5.1"}]
    cluster["slurm"]["controller"] = {"placement": "container", "node": "d000"}
    cluster.pop("web_app", None)
    return config
