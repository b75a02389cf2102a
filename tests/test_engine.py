"""End-to-end through the real Pulumi engine: `pulumi up`, a second `up` that must change
nothing, changes of the README's change table, `refresh` and `destroy` of the `e2e` stack on
this machine, with the engine's event log compared step by step with what tests/harness plans
for the same change (the harness is the fast path of the other e2e tests; where the two
differ, the engine is right and the harness is fixed).

Needs the pinned CLI, its Python language host and the pulumi-command provider plugin
(tests/harness/engine.py `ready()` says what is missing); marked `engine`, run with
`./test.sh -m engine`.
"""

import base64
import copy
import time
from pathlib import Path

import pytest

from tests.harness.command_executor import State, StateEntry, _replaced_with, host_commands, plan
from tests.harness.e2e_teardown import STACK, e2e_config, remove_outside_namespace, teardown
from tests.harness.engine import Engine, ready
from tests.harness.program_harness import run_program
from tests.test_e2e import check_cluster, host_snapshot, leftovers, make_outside_namespace, require_host, sh, slurm_env
from tests.test_e2e_changes import wait_for
from tests.upgrade.test_upgrade import ALLOWED_REPLACES

pytestmark = [pytest.mark.e2e, pytest.mark.engine]

SLURM = slurm_env(STACK)


def harness_actions(old_config: dict | None, new_config: dict) -> dict[str, str]:
    """What tests/harness plans for going from `old_config` (applied) to `new_config`."""
    old = host_commands(run_program(old_config, stack=STACK)) if old_config else []
    new = host_commands(run_program(new_config, stack=STACK))
    state = State({c.urn: StateEntry(c) for c in old})
    new = [c.goal(state.resources[c.urn].command if c.urn in state.resources else None) for c in new]
    names = {c.urn: c.name for c in old} | {c.urn: c.name for c in new}
    return {names[urn]: action for urn, action in plan(state, new).items()}


def harness_deletes_first(old_config: dict, new_config: dict) -> set[str]:
    """The replaced commands whose old copy the harness deletes before it creates the new one:
    those with delete_before_replace, and those replaced with one of them (replace_with)."""
    old = host_commands(run_program(old_config, stack=STACK))
    new = host_commands(run_program(new_config, stack=STACK))
    state = State({c.urn: StateEntry(c) for c in old})
    new = [c.goal(state.resources[c.urn].command if c.urn in state.resources else None) for c in new]
    actions = plan(state, new)
    first: set[str] = set()
    for command in new:
        if actions[command.urn] == "replace" and command.delete_before_replace:
            first |= {command.urn} | _replaced_with(command.urn, new, actions)
    names = {c.urn: c.name for c in new}
    return {names[urn] for urn in first}


def fresh_engine(tmp_path: Path, revision: str | None = None) -> Engine:
    """An engine with a new stack of its own, on a host without what a previous run left."""
    missing = ready()
    assert missing is None, f"the real engine cannot run here: {missing}"
    require_host()
    teardown()
    engine = Engine(tmp_path, STACK, revision)
    engine.init()
    return engine


def changed(actions: dict[str, str]) -> dict[str, str]:
    return {name: action for name, action in sorted(actions.items()) if action != "same"}


def test_the_real_engine_runs_the_e2e_stack(tmp_path, capsys):
    engine = fresh_engine(tmp_path)
    before = host_snapshot()
    rows: list[tuple[str, dict, dict]] = []
    report: list[str] = []

    def apply(what: str, old: dict | None, new: dict, *args: str) -> dict[str, str]:
        engine.write_config(new)
        started = time.monotonic()
        update = engine.up(*args)
        seconds = time.monotonic() - started
        ran, planned = changed(update.actions()), changed(harness_actions(old, new))
        rows.append((what, ran, planned))
        steps = [f"{op} {name}" for op, name in update.steps() if op != "same"]
        report.append(f"## {what}: {seconds:.1f} s\n" + "\n".join(update.output.splitlines()[-12:]))
        report.append("engine steps, in order: " + ", ".join(steps))
        assert ran == planned, f"{what}: the engine did {ran}, the harness plans {planned}"
        if old is not None:
            first = update.deleted_first()
            assert first == harness_deletes_first(old, new), (what, first, steps)
        return update.actions()

    config = e2e_config("container")
    try:
        make_outside_namespace()
        actions = apply("bring-up", None, config)
        assert set(actions.values()) == {"create"}
        check_cluster(config, engine.outputs(), report)

        actions = apply("second up, nothing changed", config, config, "--expect-no-changes")
        assert set(actions.values()) == {"same"}

        # Grow while a job runs on c001: the job survives.
        job = sh("sbatch", "--parsable", "-w", "c001", "--chdir=/tmp", "--wrap", "sleep 300", env=SLURM).stdout.strip()
        wait_for(f"squeue -h -j {job} -o %T | grep -q RUNNING")
        grown = e2e_config("container", grow=True)
        apply("add a node while a job runs", config, grown)
        assert sh("squeue", "-h", "-j", job, "-o", "%T", env=SLURM).stdout.strip() == "RUNNING", "the job died"
        sh("scancel", job, env=SLURM)

        # The web app's name: a replace row.
        renamed = copy.deepcopy(grown)
        renamed["cluster"]["web_app"]["name"] = "portal"
        apply("web_app.name", grown, renamed)

        # The image's packages: replace_with and delete-before-replace through the image.
        rebuilt = copy.deepcopy(renamed)
        rebuilt["cluster"]["image"] = {"extra_packages": ["less"]}
        update_order = apply("image.extra_packages", renamed, rebuilt)
        assert "replace" in update_order.values()
        check_cluster(rebuilt, engine.outputs(), report)

        refreshed = engine.refresh("--expect-no-changes")
        report.append("## refresh\n" + "\n".join(refreshed.output.splitlines()[-6:]))

        destroyed = engine.destroy()
        assert set(destroyed.actions().values()) == {"delete"}
        report.append("## destroy\n" + "\n".join(destroyed.output.splitlines()[-6:]))
        remove_outside_namespace()  # the test's own client namespace, made after `before`
        assert leftovers(STACK) == []
        assert host_snapshot() == before
    finally:
        engine.destroy(check=False)
        teardown()
        with capsys.disabled():
            print("\n".join(report))
            print("\nengine vs harness (changed resources):")
            for what, ran, planned in rows:
                print(f"- {what}: engine {ran or 'nothing'}; harness {'same' if ran == planned else planned}")


def test_the_real_engine_runs_two_hosts_over_ssh_and_keeps_secrets_out_of_the_state(tmp_path, capsys):
    """The second host is a network namespace with its own sshd (tests/harness/ssh_hosts.py):
    pulumi-command's own SSH client, host key check and environment handling. The private key
    is set the way the README tells a user; the exported state holds none of the secrets."""
    from tests.harness import ssh_hosts
    from tests.harness.e2e_teardown import SECOND_HOST, SECRET, SHARED_DIR, teardown_ssh_stacks, two_host_config
    from tests.test_e2e_hosts import second_host_leftovers

    engine = fresh_engine(tmp_path)
    before = host_snapshot()
    report: list[str] = []
    try:
        server = ssh_hosts.start(SECOND_HOST)
        config = two_host_config(server["host_key"])
        Path(SHARED_DIR).mkdir(parents=True, exist_ok=True)
        engine.write_config(config)
        # As the README tells a user: the key from a file, never on a command line of its own.
        engine.pulumi("config", "set", "--secret", "--stack", STACK, SECRET, "--", server["client_key"])
        stack_file = engine.stack_file.read_text()
        assert "encryptionsalt: " in stack_file and f"gpu-cluster:{SECRET}:\n    secure: " in stack_file
        assert "PRIVATE KEY" not in stack_file

        started = time.monotonic()
        first = engine.up()
        report.append(
            f"## two hosts, bring-up: {time.monotonic() - started:.1f} s\n" + "\n".join(first.output.splitlines()[-8:])
        )
        assert set(first.actions().values()) == {"create"}
        remote = [name for op, name in first.steps() if name.startswith("e2e-c002")]
        assert remote, "no command of h2's nodes ran"
        hostnames = sh("srun", "--chdir=/tmp", "-N4", "hostname", env=SLURM).stdout
        report.append("$ srun -N4 hostname\n" + hostnames)
        assert sorted(hostnames.split()) == ["c000", "c001", "c002", "c003"]

        again = engine.up("--expect-no-changes")
        assert set(again.actions().values()) == {"same"}

        exported = engine.export()
        munge_key = base64.b64encode(Path(f"/var/lib/gpucluster/{STACK}/munge.key").read_bytes()).decode()
        key_body = "".join(line for line in server["client_key"].splitlines() if "PRIVATE KEY" not in line)
        found = {
            "munge key": munge_key[:40] in exported,
            "SSH private key": key_body[:40] in exported or "PRIVATE KEY" in exported,
        }
        report.append("secrets found in `pulumi stack export`: " + ", ".join(f"{k}: {v}" for k, v in found.items()))
        assert not any(found.values()), found
        assert '"ciphertext"' in exported, "the state holds the secrets encrypted"

        destroyed = engine.destroy()
        assert set(destroyed.actions().values()) == {"delete"}
        assert second_host_leftovers() == []
    finally:
        engine.destroy(check=False)
        teardown_ssh_stacks()
        teardown()
        with capsys.disabled():
            print("\n".join(report))
    assert leftovers(STACK) == []
    assert host_snapshot() == before


REPLACE_OPS = ("replace", "create-replacement", "delete-replaced")
# The release before the real engine ran this program: a state it wrote must upgrade in place.
PREVIOUS_RELEASE = "fb772c7"


def test_a_state_written_by_the_previous_release_upgrades_without_replace_or_delete(tmp_path, capsys):
    engine = fresh_engine(tmp_path, revision=PREVIOUS_RELEASE)
    config = e2e_config("container")
    try:
        make_outside_namespace()
        engine.write_config(config)
        engine.up()
        engine.use_program()
        engine.write_config(config)
        preview = engine.preview("--diff")
        steps = {name: op for op, name in preview.steps() if op not in ("same", "read")}
        # Updates are what an upgrade does; a replace only where the harness's upgrade test
        # justifies it (tests/upgrade/test_upgrade.py ALLOWED_REPLACES); never a delete.
        unexpected = {
            name: op
            for name, op in steps.items()
            if op != "update" and not (op in REPLACE_OPS and name.endswith(tuple(ALLOWED_REPLACES)))
        }
        with capsys.disabled():
            print(
                f"\nupgrade from {PREVIOUS_RELEASE}: "
                + (", ".join(f"{n} {o}" for n, o in sorted(steps.items())) or "no change")
            )
        assert not unexpected, f"the upgrade would {unexpected}"
    finally:
        engine.destroy(check=False)
        teardown()
