"""The script store (components/common/script_store.py): a command's inputs are a short stub, the
files it names run as the whole text did, a missing or changed file stops the command with a
clear error, and the state a command keeps stays a few KB whatever the cluster's size."""

import json
import subprocess

import pytest

from components.common import script_store
from components.common.script_store import Part, env_part, stub
from components.common.transport import INTERPRETER, STORE_CREATE, STORE_DELETE
from tests.benchmark_bringup import bench_config
from tests.harness.program_harness import run_program, stack_config

COMMANDS = ("command:local:Command", "command:remote:Command")
SECRETS = {"gpu2SshKey": "placeholder", "awsSshKey": "placeholder"}
# What one command may keep in its inputs (the state holds them twice: inputs, and outputs
# that echo them). Before the store, a node's container kept 55 KB, the preflight 66 KB; the
# largest now is an EC2 host's key reader (5.2 KB), which runs where `pulumi up` does.
BOUND = 6144


def ship(store, parts: list[Part]) -> None:
    store.mkdir(parents=True, exist_ok=True)
    for part in parts:
        (store / part.name).write_text(part.text)


def run(text: str, stdin: str = "", env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*INTERPRETER, text], input=stdin, capture_output=True, text=True, env=env, timeout=30, check=False
    )


PARTS = [
    env_part("LONG_TEXT", "it's\n  two lines, a $dollar and a `tick`\n\n"),
    Part("lib/core.sh", "set -euo pipefail\nsay() { printf '%s|' \"$@\"; }\n"),
    Part("x_create.sh", 'say "$LONG_TEXT" "$0" "$(cat)" "$SHORT"\n'),
]


def test_the_stub_runs_the_files_as_the_whole_text_ran(tmp_path):
    store = tmp_path / "scripts"
    ship(store, PARTS)
    env = {"PATH": "/usr/bin:/bin", "SHORT": "s"}
    whole = run("".join(part.text for part in PARTS), "from stdin", env)
    stubbed = run(stub(str(store), PARTS), "from stdin", env)
    assert whole.returncode == stubbed.returncode == 0, stubbed.stderr
    # The parameter keeps its quotes, dollars and trailing newlines; stdin reaches the script.
    assert stubbed.stdout == whole.stdout == "it's\n  two lines, a $dollar and a `tick`\n\n|/bin/bash|from stdin|s|"


@pytest.mark.parametrize("damage", ["missing", "changed"])
def test_a_missing_or_changed_file_stops_the_command_naming_it(tmp_path, damage):
    store = tmp_path / "scripts"
    ship(store, PARTS)
    victim = store / PARTS[1].name
    victim.unlink() if damage == "missing" else victim.write_text("echo other\n")
    done = run(stub(str(store), PARTS) + "echo not reached\n")
    assert done.returncode == 1
    assert str(victim) in done.stderr and "script store" in done.stderr, done.stderr
    assert "not reached" not in done.stdout


def test_shipping_adds_files_and_never_replaces_one(tmp_path):
    """The local store's create: the set's files moved in whole; twice is the same; a later set
    adds its files and keeps the earlier ones (a delete may still need them); delete removes it."""
    ship_dir, store = tmp_path / "ship", tmp_path / "state" / "cluster" / "scripts"
    for name, parts in (("one", PARTS[:2]), ("two", [PARTS[2]])):
        ship(ship_dir / "sets" / name / "scripts", parts)
    env = {"PATH": "/usr/bin:/bin", "SHIP_DIR": str(ship_dir), "STORE": str(store)}
    for name in ("one", "one", "two"):
        done = run(STORE_CREATE, env={**env, "SET": name})
        assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in store.iterdir()) == sorted(part.name for part in PARTS)
    assert run(stub(str(store), PARTS), "x", {**env, "SHORT": "s"}).returncode == 0
    assert run(STORE_DELETE, env=env).returncode == 0
    assert not (tmp_path / "state" / "cluster").exists()


def _largest(run) -> tuple[int, str]:
    """The largest inputs of a command; not counting the stand-in GPUs (a test setting,
    `gpu.stand_in`), which run before the store with their whole text (11 KB)."""
    sizes = [
        (len(json.dumps(r.engine_inputs, default=str)), r.name)
        for r in run.resources
        if r.type in COMMANDS and not r.name.endswith("-stand-in-gpus")
    ]
    return max(sizes)


@pytest.mark.parametrize("stack", ["e2e", "local", "nogpu", "twohost", "ec2"])
def test_every_command_keeps_a_few_kb_in_the_state(stack):
    found = run_program(stack_config(stack), stack=stack, secrets=SECRETS)
    size, name = _largest(found)
    assert size <= BOUND, f"{name} keeps {size} bytes of inputs"
    # The texts are still there for the review: the whole script, with its helpers.
    node = next(r for r in found.resources if r.name.endswith("c000-lxc"))
    assert node.inputs["create"].startswith(("# ---- lib/core.sh ----", "# ---- ssh_prelude.sh"))
    assert len(node.engine_inputs["create"]) < 2048


def test_the_bound_holds_at_64_nodes():
    """What grows with the cluster (slurm.conf, the preflight's and boot unit's lists of nodes)
    goes to the store, so no command's inputs grow with the node count beyond the bound."""
    size, name = _largest(run_program(bench_config(64), stack="bench"))
    assert size <= BOUND, f"{name} keeps {size} bytes of inputs at 64 nodes"


def test_the_stub_names_each_file_so_a_preview_says_what_changed():
    found = run_program(stack_config("e2e"), stack="e2e")
    create = found.by_name("e2e-c000-lxc").engine_inputs["create"]
    labels = [line.split("# ", 1)[1] for line in create.splitlines() if line.startswith('set -- "$@"')]
    assert labels[0] == "env LXC_CONFIG" and "lib/core.sh" in labels and labels[-1] == "container_create.sh"
    # The program shipped each named file into the set that `e2e-scripts` copies to the host.
    shipped = found.by_name("e2e-scripts").engine_inputs["environment"]["SET"]
    folder = script_store.SHIP_DIR / "sets" / shipped / "scripts"
    names = [line.split()[3] for line in create.splitlines() if line.startswith('set -- "$@"')]
    assert all((folder / name).exists() for name in names)


def test_an_installers_output_goes_to_its_log_and_its_failure_shows_the_end(tmp_path):
    """`logged` (core.sh): the lines stay out of the command's stderr, which the state keeps."""
    from components.common.transport import helpers

    log = tmp_path / "logs" / "build.log"
    text = f'{helpers(["core.sh"])}\nlogged {log} seq 1 500\nlogged {log} sh -c "echo broken; exit 3"\n'
    done = run(text, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 3
    assert "500" in log.read_text() and "\n1\n" not in done.stderr
    assert "broken" in done.stderr and f"its whole output is in {log}" in done.stderr
