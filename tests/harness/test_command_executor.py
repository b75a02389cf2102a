"""The end-to-end harness itself: it must order, run and fail commands as the engine would."""

import os
import signal
import threading
import time
from dataclasses import replace

import pytest

from tests.harness import concurrency
from tests.harness.command_executor import (
    UNBOUNDED,
    CommandFailedError,
    HostCommand,
    State,
    apply,
    cli_parallel,
    destroy,
    destroy_state,
    gomaxprocs,
    up,
    update,
)

BASH = ("/bin/bash", "-c")


def command(
    name: str, log: str, *, after=(), create=None, delete=None, triggers=(), env=None, dbr=False, replace_with=()
) -> HostCommand:
    return HostCommand(
        name=name,
        urn=f"urn:{name}",
        create=create or f'echo "create {name}" >> "{log}"',
        update=None,
        delete=delete or f'echo "delete {name}" >> "{log}"',
        environment=env or {},
        interpreter=BASH,
        dependencies=frozenset(f"urn:{dep}" for dep in after),
        triggers=tuple(triggers),
        delete_before_replace=dbr,
        replace_with=frozenset(f"urn:{other}" for other in replace_with),
    )


def graph(log: str, **changes) -> list[HostCommand]:
    return [
        command("base", log, **changes.get("base", {})),
        command("left", log, after=["base"], **changes.get("left", {})),
        command("right", log, after=["base"], **changes.get("right", {})),
        command("top", log, after=["left", "right"], **changes.get("top", {})),
    ]


def lines(path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_creates_follow_dependencies_and_deletes_reverse_them(tmp_path):
    log = tmp_path / "log"
    apply(graph(log))
    created = lines(log)
    assert created[0] == "create base" and created[-1] == "create top"
    log.unlink()
    destroy(graph(log))
    deleted = lines(log)
    assert deleted[0] == "delete top" and deleted[-1] == "delete base"


def test_independent_commands_run_concurrently(tmp_path):
    log = tmp_path / "log"
    # Each side waits until the other has started: only a concurrent run finishes.
    wait_for = 'touch "{me}"; for _ in $(seq 100); do [ -e "{other}" ] && exit 0; sleep 0.05; done; exit 1'
    left, right = tmp_path / "left", tmp_path / "right"
    apply(
        graph(
            log,
            left={"create": wait_for.format(me=left, other=right)},
            right={"create": wait_for.format(me=right, other=left)},
        )
    )


def test_a_failure_stops_what_depends_on_it(tmp_path):
    log = tmp_path / "log"
    with pytest.raises(CommandFailedError, match="left exited 3"):
        apply(graph(log, left={"create": "echo boom >&2; exit 3"}))
    assert "create top" not in lines(log)


def test_environment_reaches_the_script(tmp_path):
    log = tmp_path / "log"
    apply([command("only", log, create=f'printf "%s" "$GREETING" > "{log}"', env={"GREETING": "a b; $(x)"})])
    assert log.read_text() == "a b; $(x)"


def test_update_creates_replaces_reruns_and_leaves_the_rest(tmp_path):
    log = tmp_path / "log"
    new = [
        *graph(log, right={"triggers": ["v2"]}, top={"env": {"X": "1"}}),
        command("extra", log, after=["base"]),
    ]
    _, actions = update(graph(log), new)
    assert actions == {"base": "same", "left": "same", "right": "replace", "top": "update", "extra": "create"}
    done = lines(log)
    assert sorted(done) == ["create extra", "create right", "create top", "delete right"]
    # Replacement is create-before-delete: the new one first, dependents updated, the old one
    # deleted at the end of the update. An update runs create.
    assert done.index("create right") < done.index("create top") < done.index("delete right")


def test_update_deletes_what_is_gone(tmp_path):
    log = tmp_path / "log"
    old = graph(log)
    _, actions = update(old, old[:-1])
    assert actions["top"] == "delete"
    assert lines(log) == ["delete top"]


def test_delete_before_replace_deletes_the_old_one_and_what_is_replaced_with_it_first(tmp_path):
    """As the engine does it (tests/test_e2e_changes.py): the delete-before-replace chain goes first,
    dependents first; a resource replaced with it that is not delete-before-replace itself is
    created anew and its old copy deleted at the end, after the new copy exists."""
    log = tmp_path / "log"
    old = [
        command("image", log, dbr=True),
        command("node", log, after=["image"], dbr=True, replace_with=["image"]),
        command("daemon", log, after=["node"], replace_with=["node"]),
        command("bystander", log, after=["image"]),
    ]
    new = [
        command("image", log, dbr=True, triggers=["v2"]),
        *old[1:],
    ]
    _, actions = update(old, new)
    assert actions == {"image": "replace", "node": "replace", "daemon": "replace", "bystander": "same"}
    assert lines(log) == [
        "delete node",
        "delete image",
        "create image",
        "create node",
        "create daemon",
        "delete daemon",
    ]


def test_replace_with_without_delete_before_replace_creates_first_and_deletes_at_the_end(tmp_path):
    log = tmp_path / "log"
    old = [command("image", log), command("node", log, after=["image"], replace_with=["image"])]
    new = [command("image", log, triggers=["v2"]), old[1]]
    _, actions = update(old, new)
    assert actions == {"image": "replace", "node": "replace"}
    assert lines(log) == ["create image", "create node", "delete node", "delete image"]


def test_a_failed_create_leaves_nothing_in_state_and_the_next_up_retries(tmp_path):
    log, flag = tmp_path / "log", tmp_path / "fail"
    flag.touch()
    create = f'[ -e "{flag}" ] && exit 4; echo "create flaky" >> "{log}"'
    commands = [command("base", log), command("flaky", log, after=["base"], create=create)]
    state = State()
    with pytest.raises(CommandFailedError, match="flaky exited 4"):
        up(state, commands)
    assert set(state.resources) == {"urn:base"}
    flag.unlink()
    _, actions = up(state, commands)
    assert actions == {"base": "same", "flaky": "create"}
    assert set(state.resources) == {"urn:base", "urn:flaky"}


def test_a_failed_update_deletes_nothing(tmp_path):
    log = tmp_path / "log"
    old = graph(log)
    new = [*graph(log, left={"create": "exit 5", "env": {"X": "1"}})[:-1]]
    with pytest.raises(CommandFailedError, match="left exited 5"):
        update(old, new)
    assert "delete top" not in lines(log)


def test_update_and_delete_see_the_previous_output(tmp_path):
    log = tmp_path / "log"
    report = f'echo "$0 stdout=${{PULUMI_COMMAND_STDOUT-unset}}" >> "{log}"; echo made-$RUN'
    commands = [
        command(
            "thing", log, create=report.replace("$0", "create"), delete=report.replace("$0", "delete"), env={"RUN": "1"}
        )
    ]
    state = State()
    up(state, commands)
    assert state.resources["urn:thing"].stdout == "made-1"
    changed = [
        command(
            "thing", log, create=report.replace("$0", "update"), delete=report.replace("$0", "delete"), env={"RUN": "2"}
        )
    ]
    up(state, changed)
    destroy_state(state)
    assert lines(log) == ["create stdout=unset", "update stdout=made-1", "delete stdout=made-2"]
    assert state.resources == {}


def recorders(folder, count: int, barrier: int, *, after=()) -> list[HostCommand]:
    """`count` independent commands that record how many run at once (tests/harness/concurrency.py)."""
    run = concurrency.script(folder, barrier, hold=0.3)
    return [replace(command(f"n{i}", "", create=run, after=after), interpreter=("/bin/sh", "-c")) for i in range(count)]


@pytest.mark.parametrize(
    ("environ", "parallel", "expected"),
    [
        ({}, None, "4 x GOMAXPROCS"),  # the CLI's default: 8 on two cores
        ({"PULUMI_PARALLEL": "3"}, None, 3),
        ({"PULUMI_PARALLEL": "3"}, 5, 5),  # --parallel wins over the environment
        ({"PULUMI_PARALLEL": "0"}, None, "4 x GOMAXPROCS"),  # not a positive integer: unset
        ({"PULUMI_PARALLEL": "many"}, None, "4 x GOMAXPROCS"),
        ({"GOMAXPROCS": "1"}, None, 4),
        ({}, 1, 1),
        ({}, 0, 1),  # --parallel 0 or less: one at a time, as the engine's DegreeOfParallelism
    ],
)
def test_at_most_the_cli_s_parallelism_runs_at_once(tmp_path, monkeypatch, environ, parallel, expected):
    for name in ("PULUMI_PARALLEL", "GOMAXPROCS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    if expected == "4 x GOMAXPROCS":
        expected = 4 * gomaxprocs({})
    assert cli_parallel(parallel) == expected
    # Two more than the limit (bounded, on a many-core machine: at most 40 runs).
    count = min(expected + 2, 40)
    limit = min(expected, count)
    folder = tmp_path / "at-once"
    apply(recorders(folder, count, barrier=limit), parallel=parallel)
    assert concurrency.started(folder) == count
    assert concurrency.peak(folder) == limit


def test_destroy_and_the_deletes_at_the_end_keep_the_limit(tmp_path):
    folder = tmp_path / "deletes"
    run = concurrency.script(folder, 3, hold=0.3)
    commands = [replace(c, delete=run) for c in recorders(tmp_path / "creates", 5, barrier=3)]
    state = State()
    up(state, commands, parallel=3)
    up(state, [], parallel=3)  # every command left the program: deleted at the end of the update
    assert concurrency.started(folder) == 5 and concurrency.peak(folder) == 3
    folder2 = tmp_path / "destroy"
    run = concurrency.script(folder2, 2, hold=0.3)
    destroy([replace(c, delete=run) for c in commands], parallel=2)
    assert concurrency.started(folder2) == 5 and concurrency.peak(folder2) == 2


def test_unbounded_parallelism_starts_every_ready_step_at_once(tmp_path):
    folder = tmp_path / "unbounded"
    # Twelve commands that each wait until all twelve have started: only an unbounded run has
    # them all at once (a limit of eight would leave four to start after the barrier's timeout).
    apply(recorders(folder, 12, barrier=12), parallel=UNBOUNDED)
    assert concurrency.peak(folder) == 12


def test_an_interrupted_update_lets_the_running_steps_end_and_starts_nothing_new(tmp_path):
    log = tmp_path / "log"
    started = tmp_path / "left-started"
    slow = f'touch "{started}"; sleep 1; echo "create left" >> "{log}"'

    def interrupt_once_left_runs() -> None:
        # On the marker rather than after a fixed delay: a busy machine may run base late.
        deadline = time.monotonic() + 60
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGINT)

    # Python keeps SIGINT ignored when it started so (a run in the background of a script):
    # Ctrl-C's own handler for this test, whatever started it.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Thread(target=interrupt_once_left_runs, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            apply(graph(log, left={"create": slow}))
    finally:
        signal.signal(signal.SIGINT, previous)
    # The interruption came while left ran: left ended before it went on, top never started.
    assert "create left" in lines(log)
    assert "create top" not in lines(log)


def test_ignored_inputs_keep_their_state_and_retained_resources_leave_it_without_deleting(tmp_path):
    log = tmp_path / "log"
    state = State()
    up(state, graph(log))
    log.unlink()
    changed = [
        replace(c, environment={"X": "new"}, triggers=("new",), retain_on_delete=True,
                ignore_changes=frozenset({"environment", "triggers"}))
        for c in graph(log)
    ]  # fmt: skip
    _, actions = up(state, changed)
    assert set(actions.values()) == {"same"} and lines(log) == []
    assert all(entry.command.retain_on_delete and entry.command.environment == {} for entry in state.resources.values())
    _, actions = up(state, [])
    assert set(actions.values()) == {"delete"} and lines(log) == [] and not state.resources


def test_a_resource_deleted_with_another_being_deleted_runs_no_delete(tmp_path):
    log = tmp_path / "log"
    machine = command("machine", log)
    on_it = [replace(c, deleted_with="urn:machine") for c in graph(log)]
    state = State()
    up(state, [machine, *on_it])
    log.unlink()
    destroy_state(state)
    assert lines(log) == ["delete machine"]
    # Without the machine going, the same resources do run their deletes.
    up(state, [machine, *on_it])
    log.unlink()
    up(state, [machine])
    assert sorted(lines(log)) == ["delete base", "delete left", "delete right", "delete top"]
