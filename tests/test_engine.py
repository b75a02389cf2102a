"""The real Pulumi engine on a state another release wrote: `pulumi up` of an earlier release's
program on this machine, then a preview of the working tree's on that state, which must
update in place (no delete, no unexplained replace).

The other e2e tests run every cluster through the engine (tests/harness/engine_cluster.py);
tests/test_e2e_changes.py also compares each change with the imitation's plan
(tests/harness/imitation_check.py). Needs the pinned CLI, its Python language host and the
pulumi-command provider plugin (tests/harness/engine.py `ready()` says what is missing).
"""

from pathlib import Path

import pytest

from tests.harness.e2e_teardown import STACK, e2e_config, teardown
from tests.harness.engine import Engine, ready
from tests.test_e2e import make_outside_namespace, require_host
from tests.upgrade.test_upgrade import ALLOWED_REPLACES

pytestmark = [pytest.mark.e2e, pytest.mark.engine]


def fresh_engine(tmp_path: Path, revision: str | None = None) -> Engine:
    """An engine with a new stack of its own, on a host without what a previous run left."""
    missing = ready()
    assert missing is None, f"the real engine cannot run here: {missing}"
    require_host()
    teardown()
    engine = Engine(tmp_path, STACK, revision)
    engine.init()
    return engine


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
        # justifies it (tests/upgrade/test_upgrade.py ALLOWED_REPLACES); never a delete. The
        # creates: the host's script store, which the commands run from since this release, the
        # host's kernel limits for its containers, and its measure (the nodes' memory shares);
        # and each node's setup for jobs in container images, on by default since.
        unexpected = {
            name: op
            for name, op in steps.items()
            if op != "update"
            and not (op in REPLACE_OPS and name.endswith(tuple(ALLOWED_REPLACES)))
            and not (op == "create" and name in ("e2e-scripts", "e2e-host-kernel-limits", "e2e-host-size"))
            and not (op == "create" and name.endswith("-slurm-containers"))
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
