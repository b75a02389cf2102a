"""Upgrade safety: moving code must not move resources.

For every stack recorded from the previous release (tests/upgrade/snapshots/, made by
tests/upgrade/snapshot.py), the current program runs under mocks on the same stack file and
the engine's plan against the recorded graph is computed (tests/harness/plan.py). An
upgrade deletes nothing, replaces only what is listed below, and updates only (a) commands
whose script text changed, which re-run their idempotent create in place (the documented
choice for script and helper edits, components/transport.py), and (b) what is listed below:
every other changed input needs a reason here.
"""

import json
import shutil
from pathlib import Path

import pytest

from components import transport
from tests.harness.plan import plan, records, summary
from tests.harness.program_harness import ROOT, run_program, stack_config
from tests.upgrade import lib_reach
from tests.upgrade.snapshot import release_stack_config

SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"
STACKS = sorted(path.stem for path in SNAPSHOTS.glob("*.json"))

# Resource name suffix -> why an upgrade from the recorded release updates it beyond its
# script text (same for every stack).
ALLOWED_UPDATES: dict[str, str] = {
    "-health": "the health gate reads node and GPU counts from Slurm instead of its environment",
    "-host-packages": "packages are never removed; destroy lists them in the kept directory",
    "-lxc": (
        "a clone cut short is recognized by its pending marker in the cluster directory; the "
        "devices cgroup allows the container's own devices (DEVICES) instead of every GPU"
    ),
    "-rules": "a forward takes its allowed source networks (SOURCES, empty: any, as before)",
    # Kubernetes pods get a restrictive securityContext and no service-account token. The
    # Deployments roll their pods; the Kubernetes provider replaces the Jobs and the notebook
    # Pod (their pod specs are immutable): they hold no state, and a Job runs once more.
    "-nvidia-smi": "pod hardening (securityContext, no service-account token)",
    "-device-query": "pod hardening (securityContext, no service-account token)",
    "-notebook": "pod hardening (securityContext, no service-account token)",
    "-mnist": "pod hardening (securityContext, no service-account token)",
    "-web-app-deployment": "pod hardening (securityContext, no service-account token)",
    "-image-rootfs": (
        "destroy keeps the built image (IMAGE_DIGEST, KEPT_DIR, KEEP_IMAGE, KEPT_MAX_AGE_DAYS); the create "
        "finds its image built and changes nothing"
    ),
    "-web-container-lxc": "the app's container mounts the cluster snapshot read-only",
    "-web-service": "the app becomes a page with its API under /api/, its settings one JSON",
    "-slurm-munge-key": "a munge key already there is trusted only when root's alone",
    "-slurm-client": "the e2e stack's nodes declare 2 CPUs (slurm.conf CPUs=2)",
    "-slurm-slurmctld": "the e2e stack's nodes declare 2 CPUs (slurm.conf CPUs=2)",
}
# Resource name suffix -> why an upgrade replaces it.
ALLOWED_REPLACES: dict[str, str] = {
    "-host-preflight": (
        "a read-only check without delete: the replacement only runs it once more; it now also "
        "checks the state directory (a changed host.state_dir is refused) and half-made clones"
    ),
}
SCRIPT_TEXT = {"create", "update", "delete"}


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

    def named(action: str) -> dict[tuple[str, str], tuple]:
        return {(stack, step.urn.rsplit("::", 1)[1]): step.changed for step in steps if step.action == action}

    def unexplained(found: dict, reasons: dict[str, str]) -> dict:
        return {key: changed for key, changed in found.items() if not key[1].endswith(tuple(reasons))}

    assert named("delete") == {}
    assert unexplained(named("replace"), ALLOWED_REPLACES) == {}
    beyond_scripts = {key: changed for key, changed in named("update").items() if set(changed) - SCRIPT_TEXT}
    assert unexplained(beyond_scripts, ALLOWED_UPDATES) == {}


@pytest.mark.parametrize("edited", ["core.sh", "iptables.sh"])
def test_an_edit_to_a_helper_file_reruns_the_commands_using_it_and_replaces_nothing(edited, monkeypatch, tmp_path):
    # The documented choice (components/transport.py): a script includes the helper files it
    # uses, so an edit to one runs again exactly the commands whose text includes it.
    library = tmp_path / "lib"
    shutil.copytree(transport.LIB, library)
    (library / edited).write_text((library / edited).read_text() + "\n# an edit\n")
    total, using = lib_reach.reach("e2e")
    old = records(run_program(stack_config("e2e"), stack="e2e"))
    monkeypatch.setattr(transport, "LIB", library)
    steps = plan(old, records(run_program(stack_config("e2e"), stack="e2e")))

    updated = {step.urn.rsplit("::", 1)[1] for step in steps if step.action == "update"}
    assert updated == set(using[edited])
    assert (len(updated) == total) == (edited == transport.CORE), "only core.sh is in every command"
    # The boot unit writes the helpers into boot.sh, so it carries their text in its environment.
    changed = {step.changed for step in steps if step.action == "update" and not step.urn.endswith("-boot-unit")}
    assert changed <= {("create",), ("create", "delete")}
    assert summary(steps)["replace"] == summary(steps)["delete"] == 0


# What the Slurm daemons are started or reconfigured over: slurmctld's config files (a change
# of a node line restarts slurmctld), the client copy, and what slurmd's create writes to
# /etc/default/slurmd (a change restarts slurmd).
SLURM_INPUTS = ("SLURM_CONF_TEXT", "GRES_CONF_TEXT", "CONF_SERVER", "JOB_ACCT_GATHER")


# The k8s stack file of the release is refused by a later rule (a notebook node_port needs
# service_type NodePort): its users edit it, which is a change of the cluster.
@pytest.mark.parametrize("stack", ["e2e", "local"])
def test_a_program_upgrade_over_the_same_stack_file_leaves_slurm_as_it_is(stack):
    # A job ends when its node's CPUs change (Slurm aborts the jobs of a node whose core count
    # changed), and a changed node line restarts slurmctld: the program alone changes neither.
    old = snapshot(stack)
    current = run_program(release_stack_config(old["commit"], stack), stack=stack)
    new = {r.name: r.inputs.get("environment", {}) for r in current.resources}
    compared = 0
    for resource in old["resources"]:
        environment = resource["inputs"].get("environment") or {}
        keys = [key for key in SLURM_INPUTS if key in environment or key in new.get(resource["name"], {})]
        if not keys:
            continue
        compared += 1
        assert resource["name"] in new, f"{resource['name']} is gone"
        assert {key: new[resource["name"]].get(key) for key in keys} == {key: environment.get(key) for key in keys}
    assert compared >= 3, "slurmctld, the client and the nodes' slurmd"
