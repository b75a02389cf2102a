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

from program_harness import ProgramRun

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
            )
        )
    return commands


def _execute(command: HostCommand, script: str, extra_env: dict, timeout: int) -> str:
    environment = {**os.environ, **command.environment, **extra_env}
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
                        future = pool.submit(_timed, command, script_of(command), timeout, started)
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


def _timed(command: HostCommand, script: str | None, timeout: int, started: float):
    stdout = _execute(command, script, {}, timeout) if script else ""
    return stdout, time.monotonic() - started


def apply(commands: list[HostCommand], workers: int = 8, timeout: int = 900) -> Timeline:
    """Run every create in dependency order, independent ones concurrently."""
    timeline = Timeline()
    waits_for = {c.urn: c.dependencies for c in commands}
    _run_graph(commands, waits_for, lambda c: c.create, "create", timeline, workers, timeout)
    return timeline


def destroy(commands: list[HostCommand], workers: int = 8, timeout: int = 600) -> Timeline:
    """Run every delete after the deletes of everything that depends on it."""
    timeline = Timeline()
    dependents = {c.urn: frozenset(d.urn for d in commands if c.urn in d.dependencies) for c in commands}
    _run_graph(commands, dependents, lambda c: c.delete, "delete", timeline, workers, timeout)
    return timeline
