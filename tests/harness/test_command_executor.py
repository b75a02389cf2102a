"""The end-to-end harness itself: it must order, run and fail commands as the engine would."""

import pytest

from tests.harness.command_executor import CommandFailedError, HostCommand, apply, destroy, update

BASH = ("/bin/bash", "-c")


def command(name: str, log: str, *, after=(), create=None, delete=None, triggers=(), env=None) -> HostCommand:
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
    # Replacement is create-before-delete unless delete_before_replace; an update runs create.
    assert done.index("create right") < done.index("delete right") < done.index("create top")


def test_update_deletes_what_is_gone(tmp_path):
    log = tmp_path / "log"
    old = graph(log)
    _, actions = update(old, old[:-1])
    assert actions["top"] == "delete"
    assert lines(log) == ["delete top"]
