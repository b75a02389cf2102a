"""Execute the program's recorded pulumi-command resources on this machine, as the engine would.

Test code, not a second way to deploy: the commands, their environments, interpreters and
dependencies come from the RegisterResource requests of a mocked run (program_harness). A
command starts once every command it depends on has finished, so independent ones (the
node containers) run concurrently; deletes run in the reverse order, also concurrently.
"""

import os
import subprocess
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from tests.harness.program_harness import ProgramRun

COMMAND_TYPE = "command:local:Command"


@dataclass(frozen=True)
class HostCommand:
    name: str
    urn: str
    create: str
    update: str | None
    delete: str | None
    environment: dict
    interpreter: tuple[str, ...]
    dependencies: frozenset[str]
    triggers: tuple = ()
    delete_before_replace: bool = False

    def same_inputs(self, other: "HostCommand") -> bool:
        return (self.create, self.update, self.delete, self.environment, self.interpreter) == (
            other.create,
            other.update,
            other.delete,
            other.environment,
            other.interpreter,
        )


@dataclass
class Step:
    name: str
    phase: str
    started: float
    seconds: float
    stdout: str


@dataclass
class Timeline:
    steps: list[Step] = field(default_factory=list)

    @property
    def wall_seconds(self) -> float:
        """From the first start to the last end."""
        if not self.steps:
            return 0.0
        return max(s.started + s.seconds for s in self.steps) - min(s.started for s in self.steps)

    def finished(self, name: str) -> float:
        """Seconds from the first start to the end of the named step."""
        start = min(step.started for step in self.steps)
        step = next(step for step in self.steps if step.name == name)
        return step.started + step.seconds - start


class CommandFailedError(AssertionError):
    pass


def host_commands(run: ProgramRun) -> list[HostCommand]:
    """The Command resources of a run, each with its dependencies on other Commands."""
    by_urn = run.by_urn
    commands = []
    for resource in run.of_type(COMMAND_TYPE):
        inputs = resource.inputs
        commands.append(
            HostCommand(
                name=resource.name,
                urn=resource.urn,
                create=inputs["create"],
                update=inputs.get("update"),
                delete=inputs.get("delete"),
                environment=dict(inputs.get("environment") or {}),
                interpreter=tuple(inputs.get("interpreter") or ("/bin/sh", "-c")),
                dependencies=frozenset(urn for urn in resource.dependencies if by_urn[urn].type == COMMAND_TYPE),
                triggers=tuple(inputs.get("triggers") or ()),
                delete_before_replace=resource.delete_before_replace,
            )
        )
    return commands


def _execute(command: HostCommand, script: str, timeout: int) -> str:
    environment = {**os.environ, **command.environment}
    done = subprocess.run(
        [*command.interpreter, script],
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise CommandFailedError(
            f"{command.name} exited {done.returncode}\n--- stderr ---\n{done.stderr[-4000:]}"
            f"\n--- stdout ---\n{done.stdout[-2000:]}"
        )
    return done.stdout


def _run_graph(commands, waits_for, script_of, phase, timeline, workers, timeout):
    """Run every command once all the commands it waits for are done; stop at the first failure."""
    pending = {c.urn: c for c in commands}
    done: set[str] = set()
    running = {}
    failure = None
    with ThreadPoolExecutor(max_workers=workers) as pool:
        while pending or running:
            if failure is None:
                for urn, command in list(pending.items()):
                    if waits_for[urn] <= done:
                        del pending[urn]
                        started = time.monotonic()
                        future = pool.submit(_timed, script_of(command), timeout, started)
                        running[future] = (command, started)
            if not running:
                break
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                command, started = running.pop(future)
                try:
                    stdout, seconds = future.result()
                except Exception as error:  # noqa: BLE001 (reported after the running ones end)
                    failure = failure or error
                    continue
                timeline.steps.append(Step(command.name, phase, started, seconds, stdout))
                done.add(command.urn)
    if failure:
        raise failure
    if pending:
        raise CommandFailedError(f"{phase}: never started {sorted(c.name for c in pending.values())}")


def _timed(steps: list[tuple[HostCommand, str | None]], timeout: int, started: float):
    """Run a command's scripts in order (two for a replacement); no script, nothing to do."""
    stdout = "".join(_execute(command, script, timeout) for command, script in steps if script)
    return stdout, time.monotonic() - started


def apply(commands: list[HostCommand], workers: int = 8, timeout: int = 900) -> Timeline:
    """Run every create in dependency order, independent ones concurrently."""
    timeline = Timeline()
    waits_for = {c.urn: c.dependencies for c in commands}
    _run_graph(commands, waits_for, lambda c: [(c, c.create)], "create", timeline, workers, timeout)
    return timeline


def destroy(commands: list[HostCommand], workers: int = 8, timeout: int = 600) -> Timeline:
    """Run every delete after the deletes of everything that depends on it."""
    timeline = Timeline()
    dependents = {c.urn: frozenset(d.urn for d in commands if c.urn in d.dependencies) for c in commands}
    _run_graph(commands, dependents, lambda c: [(c, c.delete)], "delete", timeline, workers, timeout)
    return timeline


def update(
    old: list[HostCommand], new: list[HostCommand], workers: int = 8, timeout: int = 900
) -> tuple[Timeline, dict[str, str]]:
    """What `pulumi up` does when the program changed: per command of the new program,
    create it (new), replace it (a trigger changed), run its update script (another input
    changed; pulumi-command 1.2 runs `create` again when there is no `update`), or leave it;
    then delete the commands that are gone. Returns the timeline and the action per command.
    """
    before = {c.name: c for c in old}
    actions: dict[str, str] = {}

    def steps(command: HostCommand) -> list[tuple[HostCommand, str | None]]:
        previous = before.get(command.name)
        if previous is None:
            actions[command.name] = "create"
            return [(command, command.create)]
        if previous.triggers != command.triggers:
            actions[command.name] = "replace"
            replace = [(previous, previous.delete), (command, command.create)]
            return replace if command.delete_before_replace else replace[::-1]
        if not previous.same_inputs(command):
            actions[command.name] = "update"
            return [(command, command.update or command.create)]
        actions[command.name] = "same"
        return []

    timeline = Timeline()
    waits_for = {c.urn: c.dependencies for c in new}
    _run_graph(new, waits_for, steps, "update", timeline, workers, timeout)
    gone = [c for c in old if c.name not in {n.name for n in new}]
    actions.update({c.name: "delete" for c in gone})
    timeline.steps += destroy(gone, workers, timeout).steps
    return timeline, actions
