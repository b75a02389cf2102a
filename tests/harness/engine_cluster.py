"""The end-to-end tests' clusters through the real Pulumi engine.

The same calls as tests/harness/command_executor.py (`apply`, `update`, `destroy`, `State`,
`up`, `destroy_state`), each carried out by the pinned CLI (`pulumi up` / `pulumi destroy`, the
pulumi-command provider running every script) on a stack of its own in a temporary local
backend (tests/harness/engine.py). A test keeps what it asserts; what runs is what a user's
`pulumi up` runs.

What the program was given travels with its commands: `host_commands(run)` returns the
commands of a mocked run (for the tests that read them) together with the run's stack, config
and secrets, which the engine applies.

The one-shot forms keep their meaning:
- `apply(commands)`: `pulumi up` of a new stack (an empty state): every create runs, also on a
  host where the cluster already stands (the scripts' idempotence);
- `update(old, new)`: `pulumi up` of `new` on the stack that last applied this stack name;
- `destroy(commands)`: `pulumi destroy` of that stack; with no stack that applied it (a test's
  opening cleanup of what an interrupted run may have left), the deletes run as
  tests/harness/command_executor.py runs them, as no engine state exists to destroy from.
"""

import atexit
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tests.harness import command_executor
from tests.harness.command_executor import CommandFailedError, HostCommand, Step, Timeline, makes_the_munge_key
from tests.harness.engine import Engine, Update, ready
from tests.harness.program_harness import ProgramRun

__all__ = [
    "CommandFailedError",
    "Program",
    "State",
    "apply",
    "destroy",
    "destroy_state",
    "host_commands",
    "makes_the_munge_key",
    "up",
    "update",
]

_workdirs: list[Path] = []
# The engine that last applied each cluster (stack name and cluster name: two test clusters may
# share a stack name): update() and destroy() act on its state.
_latest: dict[tuple[str, str], Engine] = {}


@atexit.register
def _remove_workdirs() -> None:
    for workdir in _workdirs:
        shutil.rmtree(workdir, ignore_errors=True)


class Program(list):
    """A mocked run's commands, and what the engine applies: the stack, its config and secrets,
    and the program's revision (None: the working tree's; a commit: an earlier release's)."""

    def __init__(self, commands: list[HostCommand], run: ProgramRun, revision: str | None = None):
        super().__init__(commands)
        self.stack, self.config, self.secrets = run.stack, run.config, run.secrets
        self.revision = revision

    @property
    def key(self) -> tuple[str, str]:
        return self.stack, str((self.config.get("cluster") or {}).get("name"))


def host_commands(run: ProgramRun, revision: str | None = None) -> Program:
    """The commands of `run`, a mocked run of the working tree's program or, with `revision`,
    of that commit's (tests/upgrade/snapshot.py release_run)."""
    return Program(command_executor.host_commands(run), run, revision)


def _new_engine(stack: str, revision: str | None) -> Engine:
    missing = ready()
    assert missing is None, f"the real engine cannot run here: {missing}"
    workdir = Path(tempfile.mkdtemp(prefix=f"gpucluster-engine-{stack}-"))
    _workdirs.append(workdir)
    engine = Engine(workdir, stack, revision)
    engine.init()
    return engine


@dataclass
class State:
    """A stack of the real engine; it exists once the first `up` ran."""

    engine: Engine | None = None
    known: dict[str, HostCommand] = field(default_factory=dict)
    """The commands of the programs applied, by name (unique in a stack)."""
    last: Update | None = None
    """The engine's last run on this stack (its steps, in the engine's order)."""

    @property
    def resources(self) -> dict[str, command_executor.StateEntry]:
        """The command resources in the engine's state (`pulumi stack export`), by the URN of
        the mocked run (the engine's URNs name every parent type; the mocks' only the nearest)."""
        if self.engine is None:
            return {}
        entries = {}
        for resource in self.engine.resources():
            command = self.known.get(resource["urn"].rsplit("::", 1)[1])
            if command is None or not resource.get("type", "").startswith("command:"):
                continue
            outputs = resource.get("outputs") or {}
            text = {key: outputs[key] if isinstance(outputs.get(key), str) else "" for key in ("stdout", "stderr")}
            entries[command.urn] = command_executor.StateEntry(command, **text)
        return entries


def _timeline(update: Update) -> Timeline:
    """The command steps of an engine run from its event log: each from its pre-event to its
    outputs event (the events carry whole seconds; their sequence orders steps within one)."""
    timeline = Timeline()
    started: dict[str, tuple[str, str, float]] = {}
    for event in update.events:
        at = event.get("timestamp", 0) + event.get("sequence", 0) * 1e-6
        pre = event.get("resourcePreEvent")
        done = event.get("resOutputsEvent")
        meta = (pre or done or {}).get("metadata")
        if not meta or not meta["type"].startswith("command:"):
            continue
        key = f"{meta['op']} {meta['urn']}"
        if pre:
            started[key] = (meta["urn"].rsplit("::", 1)[1], meta["op"], at)
        elif key in started:
            name, op, start = started.pop(key)
            outputs = (meta.get("new") or {}).get("outputs") or {}
            stdout = outputs.get("stdout") if isinstance(outputs.get("stdout"), str) else ""
            timeline.steps.append(Step(name, op, start, at - start, stdout))
    return timeline


def _parallel(parallel: int | None) -> list[str]:
    """`--parallel N` where given; else the engine runs as ./pulumi.sh does (tests/harness/engine.py)."""
    return ["--parallel", str(parallel)] if parallel is not None else []


def up(
    state: State, new: Program, timeout: int = 900, parallel: int | None = None, args: tuple[str, ...] = ()
) -> tuple[Timeline, dict[str, str]]:
    """`pulumi up` of the program `new` on the state's stack; the action per command name
    (`args`: more of the CLI's flags, e.g. --profiling). A failed update raises
    CommandFailedError with the engine's output."""
    if state.engine is None:
        state.engine = _new_engine(new.stack, new.revision)
    engine = state.engine
    if engine.revision != new.revision:  # an upgrade (or a downgrade) of the program
        engine.use_program(new.revision)
    assert isinstance(new, Program), "the engine applies whole programs: host_commands(run_program(...))"
    state.known.update({command.name: command for command in new})
    engine.write_config(new.config)
    for key, value in new.secrets.items():
        engine.set_secret(key, value)
    _latest[new.key] = engine
    update = engine.up(*_parallel(parallel), *args, check=False, timeout=timeout)
    state.last = update
    if update.returncode != 0:
        raise CommandFailedError(f"pulumi up of stack {new.stack} failed ({update.returncode}):\n{update.output}")
    return _timeline(update), update.actions()


def destroy_state(state: State, timeout: int = 600, parallel: int | None = None) -> Timeline:
    """`pulumi destroy` of the state's stack."""
    if state.engine is None:
        return Timeline()
    update = state.engine.destroy(*_parallel(parallel), check=False, timeout=timeout)
    if update.returncode != 0:
        raise CommandFailedError(f"pulumi destroy of stack {state.engine.stack} failed:\n{update.output}")
    return _timeline(update)


def apply(commands: Program, timeout: int = 900, state: State | None = None, parallel: int | None = None) -> Timeline:
    """`pulumi up` of `commands` on `state`, by default a new stack: every create runs."""
    timeline, _ = up(state if state is not None else State(), commands, timeout, parallel)
    return timeline


def update(
    old: Program, new: Program, timeout: int = 900, parallel: int | None = None
) -> tuple[Timeline, dict[str, str]]:
    """`pulumi up` of `new` on the stack that last applied this stack name (`old` was applied
    there: the engine's state, not `old`, is what the update starts from)."""
    engine = _latest.get(new.key)
    assert engine is not None, f"update of stack {new.stack}: no engine applied it before"
    state = State(engine, {command.name: command for command in [*old, *new]})
    return up(state, new, timeout, parallel)


def destroy(commands: Program, timeout: int = 600, parallel: int | None = None) -> Timeline:
    """`pulumi destroy` of the stack that last applied this stack name; without one, each
    command's delete runs (the cleanup of what an interrupted run may have left)."""
    engine = _latest.pop(commands.key, None) if isinstance(commands, Program) else None
    if engine is None:
        return command_executor.destroy(commands, timeout, parallel)
    return destroy_state(State(engine), timeout, parallel)
