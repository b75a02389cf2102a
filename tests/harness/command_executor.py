"""Execute the program's recorded pulumi-command resources on this machine, as the engine would.

Test code, not a second way to deploy: the commands, their environments, interpreters and
dependencies come from the RegisterResource requests of a mocked run (program_harness). What
the engine does with them follows its real semantics, so a test fails where `pulumi up` would:

- Diff (pulumi-command 1.2, provider/pkg/provider/common/inputs.go): `triggers` is marked
  `replaceOnChanges`, so a changed trigger replaces; any other changed input is an update.
- Update (provider/pkg/provider/local/commandController.go, `Update`): runs `update`, or
  `create` when there is no `update`; a resource whose inputs did not change runs nothing.
- Update and delete see the previous run's output as `PULUMI_COMMAND_STDOUT` and
  `PULUMI_COMMAND_STDERR` (provider/pkg/provider/local/commandOutputs.go, `run`), with the
  trailing newline trimmed as the provider stores them.
- Replacement (pulumi engine, pkg/resource/deploy/step_generator.go): by default the new
  resource is created first, dependents are updated, and the old one is deleted at the end
  of the update together with the resources that left the program, in reverse dependency
  order. With `delete_before_replace`, the old resource is deleted first, and before it every
  resource that depends on it and will be replaced with it (`calculateDependentReplacements`;
  here: the resources that name it, directly or transitively, in `replace_with`).
- `replace_with` (SDK `ResourceOptions.replace_with`, engine >= 3.207): a resource is replaced
  whenever one of the resources it names is replaced.
- A failed create leaves nothing in the state; a failed update keeps the old state; the
  update stops at the first failure (after the steps already running end) and deletes
  nothing.
- Parallelism (pkg/cmd/pulumi/operations/up.go `defaultParallel`, pkg/resource/deploy/
  step_executor.go): at most P steps run at once, the ready ones in the order they became
  ready. P is `--parallel` (here the `parallel` argument) when given, else $PULUMI_PARALLEL when
  it is a positive integer, else 4 x GOMAXPROCS (the CPUs this process may run on, capped by its
  cgroup's CPU limit, or $GOMAXPROCS); P <= 1 runs one at a time and 2**31-1 is unbounded.
  ./pulumi.sh sets PULUMI_PARALLEL for the cluster (tools/parallelism.py); callers imitating it
  pass that value. tests/test_engine_parallelism.py pins this against the pinned CLI.
- `ignore_changes` (engine): the named inputs keep their values from the state, so they
  neither update nor replace. `retain_on_delete` and `deleted_with` are read from the state
  (pkg/resource/deploy/step.go, `DeleteStep.Apply`): a retained resource, or one whose
  `deleted_with` resource is deleted in the same run, leaves the state without its delete
  running (for a remote command: without dialing its host). The state takes the program's
  options at every step, "same" included.
- `command:remote:Command` (provider/pkg/provider/remote/): the same Create/Update/Delete
  semantics, each script run over real SSH by tests/harness/ssh_executor.py: environment
  (and the previous outputs) as SSH env requests, the pinned host key checked, stdin passed.
"""

import math
import os
import shlex
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from components.common.script_store import MAX_ARG_STRLEN
from tests.harness.program_harness import ROOT, ProgramRun
from tests.harness.ssh_executor import run_over_ssh

LOCAL_TYPE, REMOTE_TYPE = "command:local:Command", "command:remote:Command"
COMMAND_TYPES = (LOCAL_TYPE, REMOTE_TYPE)
STDOUT, STDERR = "PULUMI_COMMAND_STDOUT", "PULUMI_COMMAND_STDERR"
SECRET_SIG = "4dabf18193072939515e22adb298388d"


def unwrap(value):
    """An input as the provider receives it: secret wrappers removed."""
    if isinstance(value, dict):
        if SECRET_SIG in value:
            return unwrap(value["value"])
        return {key: unwrap(item) for key, item in value.items()}
    if isinstance(value, list):
        return [unwrap(item) for item in value]
    return value


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
    replace_with: frozenset[str] = frozenset()
    stdin: str | None = None
    connection: dict | None = None
    """A remote command's SSH connection; None for a local command."""
    retain_on_delete: bool = False
    ignore_changes: frozenset[str] = frozenset()
    deleted_with: str = ""
    trigger_dependencies: frozenset[str] = frozenset()
    """The commands `triggers` is computed from (property dependencies)."""

    def same_inputs(self, other: "HostCommand") -> bool:
        return self._inputs() == other._inputs()

    def _inputs(self) -> tuple:
        return (self.create, self.update, self.delete, self.environment, self.interpreter, self.stdin, self.connection)

    def goal(self, old: "HostCommand | None") -> "HostCommand":
        """What the engine diffs and records: the ignored inputs keep their old values."""
        if old is None or not self.ignore_changes:
            return self
        kept = {name: getattr(old, name) for name in INPUT_FIELDS if INPUT_FIELDS[name] in self.ignore_changes}
        return replace(self, **kept)


# HostCommand field -> the input's name as the engine sees it (ignore_changes).
INPUT_FIELDS = {
    "create": "create",
    "update": "update",
    "delete": "delete",
    "environment": "environment",
    "interpreter": "interpreter",
    "stdin": "stdin",
    "connection": "connection",
    "triggers": "triggers",
}


@dataclass
class StateEntry:
    """What the engine keeps of a command after a successful create or update."""

    command: HostCommand
    stdout: str = ""
    stderr: str = ""


@dataclass
class State:
    """The stack's state: the commands that exist, by URN."""

    resources: dict[str, StateEntry] = field(default_factory=dict)

    def commands(self) -> list[HostCommand]:
        return [entry.command for entry in self.resources.values()]


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

    def phases(self, name: str) -> list[str]:
        return [step.phase for step in sorted(self.steps, key=lambda s: s.started) if step.name == name]


class CommandFailedError(AssertionError):
    pass


def host_commands(run: ProgramRun) -> list[HostCommand]:
    """The Command resources of a run, each with its dependencies on other Commands (through
    another custom resource, such as an SSH host's CopyToRemote of its scripts, the ones that
    resource waits for: the harness runs commands only)."""
    by_urn = run.by_urn

    def commands_under(urns) -> set[str]:
        found = set()
        for urn in urns:
            if by_urn[urn].type in COMMAND_TYPES:
                found.add(urn)
            elif by_urn[urn].custom:
                found |= commands_under(by_urn[urn].dependencies)
        return found

    commands = []
    for resource in (r for r in run.resources if r.type in COMMAND_TYPES):
        inputs = unwrap(resource.inputs)
        remote = resource.type == REMOTE_TYPE
        commands.append(
            HostCommand(
                name=resource.name,
                urn=resource.urn,
                create=inputs["create"],
                update=inputs.get("update"),
                delete=inputs.get("delete"),
                environment=dict(inputs.get("environment") or {}),
                # A remote command has no interpreter: sshd runs it with the login shell.
                interpreter=() if remote else tuple(inputs.get("interpreter") or ("/bin/sh", "-c")),
                dependencies=frozenset(commands_under(resource.dependencies)),
                triggers=tuple(inputs.get("triggers") or ()),
                delete_before_replace=resource.delete_before_replace,
                replace_with=frozenset(resource.replace_with),
                stdin=inputs.get("stdin"),
                connection=inputs["connection"] if remote else None,
                retain_on_delete=resource.retain_on_delete,
                ignore_changes=resource.ignore_changes,
                deleted_with=resource.deleted_with,
                trigger_dependencies=frozenset(
                    urn for urn in resource.trigger_dependencies if by_urn[urn].type in COMMAND_TYPES
                ),
            )
        )
    return commands


def run_script(command: HostCommand, script: str, previous: StateEntry | None = None, timeout: int = 900):
    """Run one script of a command as its provider does; (stdout, stderr), trailing newline
    trimmed, or CommandFailedError."""
    return _execute(command, script, previous, timeout)


def _execute(command: HostCommand, script: str, previous: StateEntry | None, timeout: int) -> tuple[str, str]:
    remote = command.connection is not None
    # A local command inherits the engine's environment; a remote one sends only its own.
    environment = dict(command.environment) if remote else {**os.environ, **command.environment}
    # The provider appends the previous outputs after `environment`, so they win.
    for key, value in ((STDOUT, previous.stdout if previous else ""), (STDERR, previous.stderr if previous else "")):
        if value:
            environment[key] = value
        else:
            environment.pop(key, None)
    if remote:
        done = run_over_ssh(command.connection, script, environment, command.stdin, timeout)
    else:
        with tempfile.NamedTemporaryFile("w", prefix="gpucluster-params-", suffix=".sh") as over_cap:
            # A parameter over Linux's cap on one variable stays the script's own, as the
            # engine's script store leaves it (script_store.env_part): exported, no program starts.
            for key in [key for key, value in environment.items() if len(f"{key}={value}".encode()) >= MAX_ARG_STRLEN]:
                over_cap.write(f"{key}={shlex.quote(environment.pop(key))}\n")
            over_cap.flush()
            done = subprocess.run(
                [*command.interpreter, f". {over_cap.name}\n{script}" if over_cap.tell() else script],
                cwd=ROOT,  # the engine runs local commands in the program's folder
                env=environment,
                input=command.stdin or "",
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
    return done.stdout.removesuffix("\n"), done.stderr.removesuffix("\n")


UNBOUNDED = 2**31 - 1  # math.MaxInt32: the engine's infinite parallelism


def _cgroup_cpu_limit() -> float | None:
    """The CPU limit (CPUs) of this process's cgroup and its ancestors, as Go's runtime reads it
    for GOMAXPROCS (cgroup v2 cpu.max, v1 cpu.cfs_quota_us / cpu.cfs_period_us); None: none."""
    limits = []
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers == "" and Path("/sys/fs/cgroup/cgroup.controllers").exists():
            base, files = Path("/sys/fs/cgroup"), None
        elif "cpu" in controllers.split(","):
            mounts = [Path("/sys/fs/cgroup", name) for name in ("cpu", "cpu,cpuacct", "cpuacct,cpu")]
            base = next((mount for mount in mounts if (mount / "cpu.cfs_quota_us").exists()), None)
            files = ("cpu.cfs_quota_us", "cpu.cfs_period_us")
        else:
            continue
        if base is None:
            continue
        parts = [p for p in path.split("/") if p]
        for depth in range(len(parts), -1, -1):
            folder = base.joinpath(*parts[:depth])
            try:
                if files is None:
                    quota, period = (folder / "cpu.max").read_text().split()
                else:
                    quota, period = ((folder / name).read_text().strip() for name in files)
            except (OSError, ValueError):
                continue
            if quota not in ("max", "-1"):
                limits.append(int(quota) / int(period))
    return min(limits) if limits else None


def gomaxprocs(environ: dict | None = None) -> int:
    """The GOMAXPROCS the CLI (Go >= 1.25) runs with: $GOMAXPROCS when a positive integer, else
    the CPUs this process may run on, capped by the cgroup's CPU limit rounded up (at least 2)."""
    environ = os.environ if environ is None else environ
    try:
        given = int(environ.get("GOMAXPROCS", ""))
    except ValueError:
        given = 0
    if given > 0:
        return given
    cpus = len(os.sched_getaffinity(0))
    limit = _cgroup_cpu_limit()
    return min(cpus, max(2, math.ceil(limit))) if limit is not None else cpus


def cli_parallel(parallel: int | None = None, environ: dict | None = None) -> int:
    """The steps the pinned CLI runs at once: `--parallel` (`parallel`) when given, else
    $PULUMI_PARALLEL when a positive integer, else 4 x GOMAXPROCS; at least 1, UNBOUNDED for
    no limit."""
    environ = os.environ if environ is None else environ
    if parallel is None:
        try:
            from_env = int(environ.get("PULUMI_PARALLEL", ""), 10)
        except ValueError:
            from_env = 0
        parallel = min(from_env, UNBOUNDED) if from_env > 0 else 4 * gomaxprocs(environ)
    return max(parallel, 1)


@dataclass
class _Job:
    """One node of the step graph: a function run once all `after` jobs are done."""

    key: str
    name: str
    phase: str
    run: object
    after: set[str] = field(default_factory=set)


def _run_jobs(jobs: list[_Job], timeline: Timeline, parallel: int | None = None) -> None:
    """Run every job once the jobs it waits for are done, at most `cli_parallel(parallel)` at
    once (the ready ones in the order they became ready, as the engine's workers take them);
    stop starting new ones at the first failure and raise it when the running ones have ended.
    Interrupted (Ctrl-C, or SIGTERM in the tests), likewise: as the engine does, nothing new
    starts and the running steps end before the interruption goes on (so a teardown after it
    never races a create still running)."""
    limit = cli_parallel(parallel)
    pending = {job.key: job for job in jobs}
    ready: list[_Job] = []  # dependencies done, waiting for a free slot, first ready first
    done: set[str] = set()
    failures: list[BaseException] = []
    lock = threading.Condition()
    running = 0

    def work(job: _Job) -> None:
        nonlocal running
        started = time.monotonic()
        try:
            stdout = job.run() or ""
            with lock:
                timeline.steps.append(Step(job.name, job.phase, started, time.monotonic() - started, stdout))
                done.add(job.key)
        except BaseException as error:  # noqa: BLE001 (re-raised once the running steps end)
            with lock:
                failures.append(error)
        finally:
            with lock:
                running -= 1
                lock.notify_all()

    with lock:
        try:
            while True:
                if not failures:
                    for key, job in list(pending.items()):
                        if job.after <= done:
                            del pending[key]
                            ready.append(job)
                    while ready and (limit == UNBOUNDED or running < limit):
                        running += 1
                        threading.Thread(target=work, args=(ready.pop(0),), daemon=True).start()
                if running == 0:
                    break
                lock.wait()
        except KeyboardInterrupt:
            while running:
                lock.wait()
            raise
    if failures:
        raise failures[0]
    if pending or ready:
        raise CommandFailedError(f"never started: {sorted(job.name for job in [*pending.values(), *ready])}")


def _dependents(commands: list[HostCommand]) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {c.urn: set() for c in commands}
    for command in commands:
        for dependency in command.dependencies:
            found.setdefault(dependency, set()).add(command.urn)
    return found


def plan(state: State, new: list[HostCommand]) -> dict[str, str]:
    """The engine's decision per URN: create, update, replace, same (program order), delete."""
    actions: dict[str, str] = {}
    for command in new:
        old = state.resources.get(command.urn)
        command = command.goal(old.command if old else None)
        if old is None:
            actions[command.urn] = "create"
        elif old.command.triggers != command.triggers or command.replace_with & {
            urn for urn, action in actions.items() if action == "replace"
        }:
            actions[command.urn] = "replace"
        elif not old.command.same_inputs(command):
            actions[command.urn] = "update"
        else:
            actions[command.urn] = "same"
    wanted = {c.urn for c in new}
    actions.update({urn: "delete" for urn in state.resources if urn not in wanted})
    return actions


def drops_without_running(old: HostCommand, deleting: set[str]) -> bool:
    """The engine's DeleteStep: no provider call for a retained resource, nor for one deleted
    with a resource that this run deletes."""
    return old.retain_on_delete or (bool(old.deleted_with) and old.deleted_with in deleting)


def _record(state: State, lock: threading.Lock, command: HostCommand, previous: StateEntry):
    def run():
        with lock:
            state.resources[command.urn] = StateEntry(command, previous.stdout, previous.stderr)
        return ""

    return run


def _replaced_with(root: str, new: list[HostCommand], actions: dict[str, str]) -> set[str]:
    """The resources whose old copies go first, with root's, because root is replaced delete
    before replace: those whose `triggers` are computed from root or from one of these,
    transitively (`calculateDependentReplacements`: the trigger is unknown, so the provider's
    Diff says replace), and the delete-before-replace resources naming one of them in
    replace_with. A resource replaced with root that is not delete-before-replace itself is
    replaced as any other, new copy first and old copy deleted at the end of the update: the
    engine's order (measured with pulumi 3.253: tests/test_e2e_changes.py), even when what it
    lived in was deleted first."""
    found, frontier = set(), {root}
    while frontier:
        frontier = {
            c.urn
            for c in new
            if (c.trigger_dependencies & (frontier | {root}) or (c.replace_with & frontier and c.delete_before_replace))
            and actions.get(c.urn) == "replace"
            and c.urn not in found
        }
        found |= frontier
    return found


def up(
    state: State, new: list[HostCommand], timeout: int = 900, parallel: int | None = None
) -> tuple[Timeline, dict[str, str]]:
    """`pulumi up` of the program whose commands are `new`, against `state` (changed in place);
    `parallel`: `--parallel` (None: the CLI's default, see cli_parallel).

    Returns the timeline and the action per command name (create/update/replace/same/delete).
    """
    new = [command.goal(state.resources[command.urn].command if command.urn in state.resources else None)
           for command in new]  # fmt: skip
    actions = plan(state, new)
    old = dict(state.resources)
    deleting = {urn for urn, action in actions.items() if action == "delete"}
    lock = threading.Lock()

    def step(command: HostCommand, script: str | None, previous: StateEntry | None, *, keep: bool):
        """Run one script; on success, record (or drop) the command in the state."""
        if not keep and drops_without_running(command, deleting):
            script = None

        def run():
            stdout, stderr = _execute(command, script, previous, timeout) if script else ("", "")
            with lock:
                if keep:
                    state.resources[command.urn] = StateEntry(command, stdout, stderr)
                elif state.resources.get(command.urn) is previous:
                    del state.resources[command.urn]
            return stdout

        return run

    apply_jobs: list[_Job] = []
    end_jobs: list[_Job] = []
    deleted_early: set[str] = set()
    for command in new:
        urn, action = command.urn, actions[command.urn]
        after = {f"apply:{dependency}" for dependency in command.dependencies}
        if action == "replace" and command.delete_before_replace and urn not in deleted_early:
            # The old one goes first, and before it whatever will be replaced with it.
            group = {urn} | _replaced_with(urn, new, actions)
            for member in group - deleted_early:
                first = {
                    d
                    for d in group
                    if d != member and member in old[d].command.dependencies | old[d].command.replace_with
                }
                apply_jobs.append(
                    _Job(
                        f"early:{member}",
                        old[member].command.name,
                        "delete-replaced",
                        step(old[member].command, old[member].command.delete, old[member], keep=False),
                        after | {f"early:{d}" for d in first},
                    )
                )
            deleted_early |= group
        if urn in deleted_early:
            after.add(f"early:{urn}")
        previous = old.get(urn)
        if action == "same":
            # Nothing runs; the state takes the program's options (retain_on_delete, ...).
            run, phase = _record(state, lock, command, previous), "same"
        elif action == "update":
            run, phase = step(command, command.update or command.create, previous, keep=True), "update"
        else:
            run, phase = (
                step(command, command.create, None, keep=True),
                "create" if action == "create" else "create-replacement",
            )
        apply_jobs.append(_Job(f"apply:{urn}", command.name, phase, run, after))
        if action == "replace" and urn not in deleted_early:
            end_jobs.append(
                _Job(
                    f"end:{urn}",
                    command.name,
                    "delete-replaced",
                    step(previous.command, previous.command.delete, previous, keep=False),
                )
            )
    end_jobs += [
        _Job(
            f"end:{urn}",
            old[urn].command.name,
            "delete",
            step(old[urn].command, old[urn].command.delete, old[urn], keep=False),
        )
        for urn, action in actions.items()
        if action == "delete"
    ]
    # Old copies and removed resources go at the end, each after the deletes of its dependents.
    ending = {job.key.removeprefix("end:") for job in end_jobs}
    for job in end_jobs:
        urn = job.key.removeprefix("end:")
        job.after = {f"end:{other}" for other in ending if urn in old[other].command.dependencies}

    timeline = Timeline()
    _run_jobs(apply_jobs, timeline, parallel)
    _run_jobs(end_jobs, timeline, parallel)
    names = {urn: entry.command.name for urn, entry in old.items()} | {c.urn: c.name for c in new}
    return timeline, {names[urn]: action for urn, action in actions.items()}


def destroy_state(state: State, timeout: int = 600, parallel: int | None = None) -> Timeline:
    """`pulumi destroy`: every delete after the deletes of everything that depends on it."""
    entries = list(state.resources.values())
    dependents = _dependents([e.command for e in entries])
    lock = threading.Lock()

    deleting = set(state.resources)

    def delete(entry: StateEntry):
        def run():
            if entry.command.delete and not drops_without_running(entry.command, deleting):
                _execute(entry.command, entry.command.delete, entry, timeout)
            with lock:
                state.resources.pop(entry.command.urn, None)
            return ""

        return run

    jobs = [
        _Job(
            e.command.urn,
            e.command.name,
            "delete",
            delete(e),
            {d for d in dependents.get(e.command.urn, set()) if d in state.resources},
        )
        for e in entries
    ]
    timeline = Timeline()
    _run_jobs(jobs, timeline, parallel)
    return timeline


# The single-shot forms the tests use: a fresh state per call.
def apply(
    commands: list[HostCommand], timeout: int = 900, state: State | None = None, parallel: int | None = None
) -> Timeline:
    """`pulumi up` of `commands` against `state` (a fresh, empty one by default)."""
    timeline, _ = up(state if state is not None else State(), commands, timeout, parallel)
    return timeline


def destroy(commands: list[HostCommand], timeout: int = 600, parallel: int | None = None) -> Timeline:
    """Destroy `commands` as if each were in the state with empty outputs (teardown of
    whatever a run may have left: every delete succeeds when its thing is gone)."""
    return destroy_state(State({c.urn: StateEntry(c) for c in commands}), timeout, parallel)


def update(
    old: list[HostCommand], new: list[HostCommand], timeout: int = 900, parallel: int | None = None
) -> tuple[Timeline, dict[str, str]]:
    """`pulumi up` of `new` against a state holding `old` (outputs unknown: empty)."""
    return up(State({c.urn: StateEntry(c) for c in old}), new, timeout, parallel)


def makes_the_munge_key(command: HostCommand) -> bool:
    """The one local command of a stack on SSH hosts: the cluster's munge key, made where
    `pulumi up` runs (components/common/transport.py generated_secret); it touches no host."""
    return not command.connection and command.create == "head -c 1024 /dev/urandom | base64 -w0"
