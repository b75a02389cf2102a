"""Upgrade safety: moving code must not move resources.

For every stack recorded from the previous release (tests/upgrade/snapshots/, made by
tests/upgrade/snapshot.py), the current program runs under mocks on the same stack file and
the engine's plan against the recorded graph is computed (tests/harness/plan.py). An
upgrade replaces nothing, deletes nothing, and updates exactly the resources listed below,
each with the reason the update is wanted.
"""

import json
from pathlib import Path

import pytest

from components import transport
from tests.harness.plan import plan, records, summary
from tests.harness.program_harness import ROOT, run_program, stack_config

SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"
STACKS = sorted(path.stem for path in SNAPSHOTS.glob("*.json"))

# (stack, resource name) -> why an upgrade from the recorded release updates it.
ALLOWED_UPDATES: dict[tuple[str, str], str] = {
    **{
        (stack, f"{cluster}-host-preflight"): "new checks: state dir and munge key owner/mode, online CPUs, "
        "control devices are character devices"
        for stack, cluster in (("e2e", "e2e"), ("local", "gpu"))
    },
    **{
        (stack, f"{cluster}-{node}-lxc"): "the node's cpuset follows nodes[].cpus (the container restarts once); "
        "driver file names that cannot be an LXC config line are refused"
        for stack, cluster in (("e2e", "e2e"), ("local", "gpu"))
        for node in ("c000", "c001", "c002", "c003")
    },
    **{
        (stack, f"{cluster}-web-container-lxc"): "driver file names that cannot be an LXC config line are refused"
        for stack, cluster in (("e2e", "e2e"), ("local", "gpu"))
    },
    **{
        (stack, f"{cluster}-slurm-munge-key"): "a munge key already there is trusted only when root's alone"
        for stack, cluster in (("e2e", "e2e"), ("local", "gpu"))
    },
    ("e2e", "e2e-slurm-client"): "the e2e stack's nodes declare 2 CPUs (slurm.conf CPUs=2)",
    ("e2e", "e2e-slurm-slurmctld"): "the e2e stack's nodes declare 2 CPUs (slurm.conf CPUs=2)",
}


def snapshot(stack: str) -> dict:
    return json.loads((SNAPSHOTS / f"{stack}.json").read_text())


def test_every_stack_of_the_release_is_recorded():
    assert STACKS == ["e2e", "k8s", "local"]
    for stack in STACKS:
        assert (ROOT / "stacks" / f"Pulumi.{stack}.yaml").exists(), f"stack {stack} of the release is gone"
        assert snapshot(stack)["resources"], f"{stack}: empty snapshot"


@pytest.mark.parametrize("stack", STACKS)
def test_upgrade_replaces_and_deletes_nothing(stack, capsys):
    old = snapshot(stack)
    steps = plan(old["resources"], records(run_program(stack_config(stack), stack=stack)))
    with capsys.disabled():
        print(f"\nupgrade {old['commit'][:7]} -> current, stack {stack}: {summary(steps)}")

    by_action = {action: [step for step in steps if step.action == action] for action in ("replace", "delete")}
    assert by_action["replace"] == [], [(s.urn, s.changed) for s in by_action["replace"]]
    assert by_action["delete"] == [], [s.urn for s in by_action["delete"]]
    updated = {(stack, step.urn.rsplit("::", 1)[1]): step.changed for step in steps if step.action == "update"}
    allowed = {key for key in ALLOWED_UPDATES if key[0] == stack}
    assert set(updated) == allowed, {"unexpected": {k: v for k, v in updated.items() if k not in allowed}}


def test_an_edit_to_the_shared_helpers_reruns_every_command_and_replaces_nothing(monkeypatch, tmp_path):
    # The documented choice (components/transport.py): lib.sh is part of every command's input.
    edited = tmp_path / "lib.sh"
    edited.write_text(transport.LIB.read_text() + "\n# an edit\n")
    old = records(run_program(stack_config("e2e"), stack="e2e"))
    monkeypatch.setattr(transport, "LIB", edited)
    steps = plan(old, records(run_program(stack_config("e2e"), stack="e2e")))

    commands = {record["urn"] for record in old if record["type"] == "command:local:Command"}
    assert {step.urn for step in steps if step.action == "update"} == commands
    assert {step.changed for step in steps if step.action == "update"} <= {("create",), ("create", "delete")}
    assert summary(steps)["replace"] == summary(steps)["delete"] == 0
