"""Upgrade safety: moving code must not move resources.

For every stack recorded from the previous release (tests/upgrade/snapshots/, made by
tests/upgrade/snapshot.py), the current program runs under mocks on the same stack file and
the engine's plan against the recorded graph is computed (tests/harness/plan.py). An
upgrade deletes nothing, replaces only what is listed below, and updates only (a) commands
whose script text changed, which re-run their idempotent create in place (the documented
choice for script and helper edits, components/common/transport.py), and (b) what is listed below:
every other changed input needs a reason here.
"""

import json
import re
import shutil
from pathlib import Path

import pytest

from components.common import transport
from components.composition.stack_config import ConfigError
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
        "devices cgroup allows the container's own devices (DEVICES) instead of every GPU; a node "
        "container's memory limit (applied live)"
    ),
    "-slurm-slurmd": (
        "slurmd restarts once for the containment plugins it loads at start (SLURMD_START_PLUGINS); "
        "running jobs keep their slurmstepd"
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
    "-slurm-client": "the e2e stack's nodes declare 2 CPUs (slurm.conf CPUs=2); jobs contained, memory scheduled",
    "-slurm-slurmctld": (
        "the e2e stack's nodes declare 2 CPUs (slurm.conf CPUs=2); jobs contained, memory scheduled "
        "(slurm.conf, cgroup.conf: CGROUP_CONF_TEXT)"
    ),
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


HOST_PART = "gpu-cluster:cluster:HostPart"


def _below_host_parts(graph: list[dict]) -> dict[str, dict]:
    """The resources of a graph inside a host part (at any depth), by name."""
    by_urn = {record["urn"]: record for record in graph}
    parts = {record["urn"] for record in graph if record["type"] == HOST_PART}
    below = {}
    for record in graph:
        parent = record["parent"]
        while parent in by_urn and parent not in parts:
            parent = by_urn[parent]["parent"]
        if parent in parts:
            below[record["name"]] = record
    return below


@pytest.mark.parametrize("stack", ["e2e", "local"])
def test_what_moved_into_the_host_parts_keeps_its_identity_through_aliases(stack):
    # The release had the host's resources (GpuHost, bridges, image, containers, ...) right
    # under the GpuCluster; now a HostPart per host is their parent, which changes their URNs.
    # The moved ones carry an alias to the cluster and their children inherit it, so the plan
    # takes every one over; without the aliases they would be made anew and the old deleted.
    old = snapshot(stack)["resources"]
    new = records(run_program(stack_config(stack), stack=stack))
    released = {record["name"]: record for record in old}
    moved = {name: record for name, record in _below_host_parts(new).items() if name in released}
    assert {"-host", "-bridges", "-image", "-c000", "-c000-lxc", "-image-rootfs"} <= {
        name.removeprefix(stack if stack != "local" else "gpu") for name in moved
    }
    parts = {record["urn"] for record in new if record["type"] == HOST_PART}
    direct = [name for name, record in moved.items() if record["parent"] in parts]
    assert direct and all(moved[name]["urn"] != released[name]["urn"] for name in direct)
    steps = {step.urn.rsplit("::", 1)[1]: step for step in plan(old, new)}
    taken = {name: (steps[name].action, steps[name].old_urn) for name in moved}
    assert {name: old_urn for name, (_, old_urn) in taken.items()} == {name: released[name]["urn"] for name in moved}
    assert {action for action, _ in taken.values()} <= {"same", "update", "replace"}
    replaced = [name for name, (action, _) in taken.items() if action == "replace"]
    assert not [name for name in replaced if not name.endswith(tuple(ALLOWED_REPLACES))]
    unaliased = plan(old, [{**record, "aliases": []} for record in new])
    lost = {step.urn.rsplit("::", 1)[1] for step in unaliased if step.action in ("create", "delete", "replace")}
    assert set(moved) <= lost


@pytest.mark.parametrize("edited", ["core.sh", "iptables.sh"])
def test_an_edit_to_a_helper_file_reruns_the_commands_using_it_and_replaces_nothing(edited, monkeypatch, tmp_path):
    # The documented choice (components/common/transport.py): a script includes the helper files it
    # uses, so an edit to one runs again exactly the commands whose text includes it.
    library = tmp_path / "lib"
    shutil.copytree(transport.LIB, library)
    (library / edited).write_text((library / edited).read_text() + "\n# an edit\n")
    total, using = lib_reach.reach("e2e")
    old = records(run_program(stack_config("e2e"), stack="e2e"))
    monkeypatch.setattr(transport, "LIB", library)
    steps = plan(old, records(run_program(stack_config("e2e"), stack="e2e")))

    updated = {step.urn.rsplit("::", 1)[1] for step in steps if step.action == "update"}
    # The script store ships the edited file (its set of files changed), then they run it.
    assert "e2e-scripts" in updated
    updated -= {"e2e-scripts"}
    assert updated == set(using[edited])
    assert (len(updated) == total) == (edited == transport.CORE), "only core.sh is in every command"
    # The boot unit writes the helpers into boot.sh, so it carries their text in its environment.
    changed = {
        step.changed for step in steps if step.action == "update" and not step.urn.endswith(("-boot-unit", "-scripts"))
    }
    assert changed <= {("create",), ("create", "delete")}
    assert summary(steps)["replace"] == summary(steps)["delete"] == 0


# What the Slurm daemons are started or reconfigured over: slurmctld's config files (a change
# of a node line restarts slurmctld), the client copy, and what slurmd's create writes to
# /etc/default/slurmd (a change restarts slurmd).
SLURM_INPUTS = ("SLURM_CONF_TEXT", "GRES_CONF_TEXT", "CONF_SERVER")
# What the upgrade to contained jobs changes in slurm.conf, and nothing else: the plugins, memory
# as a scheduled resource, and each node line's RealMemory (its CPUs stay, so no job is aborted);
# and, with jobs in container images on by default, the prolog that makes each person's Enroot
# directories as a job is allocated (components/containers).
CONTAINMENT_SETTINGS = {
    "Prolog": (None, "/usr/local/sbin/gpucluster-prolog"),
    "PrologFlags": (None, "Alloc"),
    "ProctrackType": ("proctrack/linuxproc", "proctrack/cgroup"),
    "TaskPlugin": ("task/none", "task/cgroup,task/affinity"),
    "SelectTypeParameters": ("CR_Core", "CR_Core_Memory"),
    # The release's nodes set no memory_mb: 1 CPU's share of the measured host (review.program).
    "DefMemPerCPU": (None, "672"),
    "GresTypes": ("gpu", "gpu,shard"),
}


def _settings(text: str) -> dict[str, str]:
    settings = [line for line in text.splitlines() if "=" in line and not line.startswith(("#", "NodeName="))]
    return dict(line.split("=", 1) for line in settings)


def _node_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("NodeName=")]


def test_a_program_upgrade_over_the_same_stack_file_changes_slurm_only_for_containment():
    # A job ends when its node's CPUs change (Slurm aborts the jobs of a node whose core count
    # changed): the upgrade adds each node's RealMemory and keeps its CPUs.
    old = snapshot("e2e")
    current = run_program(release_stack_config(old["commit"], "e2e"), stack="e2e")
    new = {r.name: r.inputs.get("environment", {}) for r in current.resources}
    compared = 0
    for resource in old["resources"]:
        environment = resource["inputs"].get("environment") or {}
        keys = [key for key in SLURM_INPUTS if key in environment or key in new.get(resource["name"], {})]
        if not keys:
            continue
        compared += 1
        assert resource["name"] in new, f"{resource['name']} is gone"
        for key in keys:
            before, after = environment.get(key), new[resource["name"]].get(key)
            if key != "SLURM_CONF_TEXT":
                assert after == before, (resource["name"], key)
                continue
            changed = {
                k: (_settings(before).get(k), _settings(after).get(k))
                for k in _settings(before).keys() | _settings(after).keys()
                if _settings(before).get(k) != _settings(after).get(k)
            }
            assert changed == CONTAINMENT_SETTINGS, resource["name"]
            assert [re.sub(r" RealMemory=[0-9]+", "", line) for line in _node_lines(after)] == _node_lines(before)
    assert compared >= 3, "slurmctld, the client and the nodes' slurmd"


def test_the_release_s_shared_gpu_stack_is_refused_with_its_migration():
    # The release's local stack shares one GPU between four nodes: the upgrade stops before
    # anything changes and says what to write instead (docs/changes.md).
    with pytest.raises(ConfigError, match=r"gpu\.share_between_nodes: true is no longer accepted"):
        run_program(release_stack_config(snapshot("local")["commit"], "local"), stack="local")
