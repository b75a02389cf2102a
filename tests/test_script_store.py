"""The script store (components/common/script_store.py): a command's inputs are a short stub, the
files it names run as the whole text did (of any size), a missing or changed file stops the
command with a clear error naming the one command that ships them again, the local store's
create repairs a damaged store, and the state a command keeps stays a few KB whatever the
cluster's size."""

import base64
import errno
import hashlib
import json
import random
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from components.common import script_store
from components.common.script_store import Part, env_part, stub
from components.common.transport import INTERPRETER, STORE_CREATE, STORE_DELETE
from components.host.config import UserConfig
from components.slurm.login import render_people
from tests.benchmark_bringup import bench_config
from tests.harness.engine import Engine, ready
from tests.harness.program_harness import ROOT, run_program, stack_config

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


# `mv` and `cp` as coreutils 9.2 to 9.4 (Ubuntu 24.04's) behave with `-n`: a skipped file (its
# destination exists) is an error, exit 1. Each call is logged.
NO_CLOBBER_FAILS = """#!/bin/bash
echo "$0 $*" >> "$CALLS"
all=("$@") no_clobber=false target="" files=() options=true
while [ $# -gt 0 ]; do
  if $options && [ "${1:0:1}" = - ]; then
    case $1 in
      --) options=false ;;
      -t) target=$2; shift ;;
      --target-directory=*) target=${1#*=} ;;
      --no-clobber) no_clobber=true ;;
      --*) ;;
      *n*) no_clobber=true ;;
    esac
  else
    files+=("$1")
  fi
  shift
done
if [ -z "$target" ]; then target=${files[-1]}; unset 'files[-1]'; fi
failed=0
if $no_clobber; then
  for f in "${files[@]}"; do
    if [ -d "$target" ]; then to=$target/${f##*/}; else to=$target; fi
    if [ -e "$to" ]; then echo "${0##*/}: not replacing '$to'" >&2; failed=1; fi
  done
fi
/bin/${0##*/} "${all[@]}" || exit
exit $failed
"""


def no_clobber_fails(tmp_path: Path) -> dict:
    """An environment whose `mv` and `cp` fail on a skipped `-n` file, as Ubuntu 24.04's."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("mv", "cp"):
        (bin_dir / name).write_text(NO_CLOBBER_FAILS)
        (bin_dir / name).chmod(0o755)
    return {"PATH": f"{bin_dir}:/usr/bin:/bin", "CALLS": str(tmp_path / "calls")}


def test_the_stand_in_fails_on_a_skipped_file_as_ubuntu_24_04s_mv_does(tmp_path):
    env = no_clobber_fails(tmp_path)
    (tmp_path / "a").write_text("new")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a").write_text("old")
    done = run(f"mv -n -- {tmp_path}/a {tmp_path}/d/", env=env)
    assert done.returncode == 1 and "not replacing" in done.stderr
    assert (tmp_path / "d" / "a").read_text() == "old"
    # `cp -n -t DIR` (as the node image's package cache was filled): the same.
    assert run(f"cp -n -t {tmp_path}/d {tmp_path}/a", env=env).returncode == 1
    (tmp_path / "b").write_text("b")
    assert run(f"cp -n -t {tmp_path}/d {tmp_path}/b", env=env).returncode == 0
    assert (tmp_path / "d" / "b").read_text() == "b"


def test_shipping_adds_files_and_never_relies_on_no_clobber(tmp_path):
    """The local store's create under a `mv`/`cp` that fail on a skipped `-n` file: the set's
    files moved in whole; twice is the same; a later set adds its files and keeps the earlier
    ones (a delete may still need them); a changed set too; delete removes it."""
    ship_dir, store = tmp_path / "ship", tmp_path / "state" / "cluster" / "scripts"
    changed = Part("x_create.sh", 'say "$LONG_TEXT" changed\n')
    for name, parts in (("one", PARTS[:2]), ("two", [PARTS[2]]), ("three", [*PARTS[:2], changed])):
        ship(ship_dir / "sets" / name / "scripts", parts)
    env = {**no_clobber_fails(tmp_path), "SHIP_DIR": str(ship_dir), "STORE": str(store)}
    for name in ("one", "one", "two", "two", "three"):
        done = run(STORE_CREATE, env={**env, "SET": name})
        assert done.returncode == 0, done.stderr
    assert "/mv " in Path(env["CALLS"]).read_text()  # the stand-ins were the ones run
    assert sorted(p.name for p in store.iterdir()) == sorted(part.name for part in [*PARTS, changed])
    assert run(stub(str(store), PARTS), "x", {**env, "SHORT": "s"}).returncode == 0
    assert run(stub(str(store), [*PARTS[:2], changed]), "x", env).stdout.endswith("changed|")
    assert run(STORE_DELETE, env=env).returncode == 0
    assert not (tmp_path / "state" / "cluster").exists()


def test_the_create_repairs_a_damaged_store_and_keeps_other_sets_files(tmp_path):
    """A file of the set missing, one changed, one replaced by an empty file: the next create
    (an update of the store's resource) puts each back whole; a file of an earlier set stays."""
    ship_dir, store = tmp_path / "ship", tmp_path / "state" / "cluster" / "scripts"
    ship(ship_dir / "sets" / "old" / "scripts", [PARTS[0]])
    ship(ship_dir / "sets" / "now" / "scripts", PARTS[1:])
    env = {**no_clobber_fails(tmp_path), "SHIP_DIR": str(ship_dir), "STORE": str(store)}
    for name in ("old", "now"):
        assert run(STORE_CREATE, env={**env, "SET": name}).returncode == 0
    (store / PARTS[1].name).unlink()
    (store / PARTS[2].name).write_text("echo damaged\n")
    (store / ".incoming.left").mkdir()  # an interrupted create's
    assert run(stub(str(store), PARTS), "x", env).returncode == 1
    done = run(STORE_CREATE, env={**env, "SET": "now"})
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in store.iterdir()) == sorted(part.name for part in PARTS)
    assert run(stub(str(store), PARTS), "x", {**env, "SHORT": "s"}).stdout.endswith("|x|s|")


def test_the_create_refuses_a_program_copy_that_is_not_its_name(tmp_path):
    ship_dir, store = tmp_path / "ship", tmp_path / "scripts"
    ship(ship_dir / "sets" / "one" / "scripts", PARTS)
    (ship_dir / "sets" / "one" / "scripts" / PARTS[2].name).write_text("echo damaged\n")
    env = {"PATH": "/usr/bin:/bin", "SHIP_DIR": str(ship_dir), "STORE": str(store), "SET": "one"}
    done = run(STORE_CREATE, env=env)
    assert done.returncode == 1 and f"{PARTS[2].name} is not the file its name says" in done.stderr
    assert not (store / PARTS[2].name).exists()


def _glob(pattern: str) -> re.Pattern:
    """A URN glob as the engine reads `--replace`'s (pulumi 3.253 deploy.UrnTargets): `**` any
    text, `*` any text without a colon."""
    return re.compile(
        "^" + ".*".join("[^:]*".join(map(re.escape, part.split("*"))) for part in pattern.split("**")) + "$"
    )


@pytest.mark.parametrize(
    ("stack", "command", "store"),
    [
        ("e2e", "e2e-c000-slurm-slurmd", "e2e-scripts"),
        ("twohost", "duo-c000-slurm-slurmd", "duo-gpu1-scripts"),
        ("twohost", "duo-c003-slurm-slurmd", "duo-gpu2-scripts"),  # over SSH
    ],
)
def test_the_message_names_the_one_command_that_ships_the_files_again(tmp_path, stack, command, store):
    """A stub of the program, its store missing a file: the message names a replace of the
    host's store resource, which matches that resource alone. Locally that resource is deleted
    first (never after the new one shipped the files, into the same folder); over SSH it is the
    SFTP copy, whose delete removes nothing. The engine's order of that replace, with the
    create and delete texts, leaves a store the command runs from."""
    found = run_program(stack_config(stack), stack=stack, secrets=SECRETS)
    stub_text = found.by_name(command).engine_inputs["create"]
    folder = tmp_path / "scripts"
    folder.mkdir()
    checked = stub_text.split("exec /bin/bash")[0]
    checked = re.sub(r"^s=.*$", f"s={folder}", checked, count=1, flags=re.MULTILINE) + "echo checked\n"
    done = run(checked, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 1 and "checked" not in done.stdout
    advised = re.search(r"missing or changed; (\./pulumi\.sh up .*) ships them again", done.stderr)
    assert advised, done.stderr
    words = advised[1].split(" ")
    assert words[:4] == ["./pulumi.sh", "up", "--stack", stack] and words[4] == "--replace"
    matched = [r for r in found.resources if _glob(words[5].strip("'")).match(r.urn)]
    assert [r.name for r in matched] == [store]
    if matched[0].type == "command:local:Command":
        assert matched[0].delete_before_replace
        # The replace, as the engine runs it: the old one's delete, then the create.
        env = {**matched[0].engine_inputs["environment"], "STORE": str(folder), "PATH": "/usr/bin:/bin"}
        for text in (STORE_DELETE, STORE_CREATE):
            assert subprocess.run([*INTERPRETER, text], env=env, cwd=ROOT, check=False).returncode == 0
        done = run(checked, env={"PATH": "/usr/bin:/bin"})
        assert done.returncode == 0 and done.stdout == "checked\n", done.stderr
    else:
        assert matched[0].type == "command:remote:CopyToRemote"


# A program of one local host's store and one command, for the real engine: ROUND and a
# parameter over the argument cap (PEOPLE lines) in its environment.
STORE_PROGRAM = """
from pathlib import Path

import pulumi

from components.common import transport

config = pulumi.Config()


class Host:
    name, connection, lxc_dir, retired, is_ssh = "store", None, "/var/lib/lxc", False, False
    state_dir = config.require("state_dir")


host = transport.connect("store", "c", Host(), pulumi.ResourceOptions())
people = "\\n".join(f"person{i} " + "k" * 700 for i in range(int(config.require("people"))))
transport.host_command(
    "store-hello",
    create=Path(config.require("script")),
    environment={"ROUND": config.require("round"), "PEOPLE": people, "MARK": config.require("mark")},
    opts=pulumi.ResourceOptions(),
    transport=host,
)
"""
HELLO = 'printf "%s %s\\n" "$ROUND" "$(lines "$PEOPLE" | wc -l)" >> "$MARK"\n'


@pytest.mark.engine
def test_the_engine_ships_repairs_by_the_advised_replace_and_removes_the_store(tmp_path):
    """Through the real engine, under a `mv`/`cp` that fail on a skipped `-n` file: a store made,
    a changed set shipped over it; then a file missing and one changed: the command fails
    naming the replace, which ships them again and leaves the store in place (locally the
    replace deletes first); the next change runs; destroy removes the store."""
    missing = ready()
    assert missing is None, f"the real engine cannot run here: {missing}"
    engine = Engine(tmp_path / "engine", "store")
    (engine.project / "__main__.py").write_text(STORE_PROGRAM)
    engine.env["CALLS"] = no_clobber_fails(tmp_path)["CALLS"]
    engine.env["PATH"] = f"{tmp_path / 'bin'}:{engine.env['PATH']}"
    script, mark, state_dir = tmp_path / "hello.sh", tmp_path / "mark", tmp_path / "state"
    script.write_text(HELLO)
    store = state_dir / "c" / "scripts"
    engine.init()

    def up(people: int, round_: int, *args: str, check: bool = True):
        settings = {"state_dir": state_dir, "script": script, "mark": mark, "people": people, "round": round_}
        engine.write_config({key: str(value) for key, value in settings.items()})
        return engine.up(*args, check=check)

    def intact() -> bool:
        return all(hashlib.sha256(p.read_bytes()).hexdigest() == p.name for p in store.iterdir())

    try:
        up(300, 1)
        up(301, 2)  # a new set shipped over the first
        assert mark.read_text() == "1 300\n2 301\n"
        assert "/mv " in Path(engine.env["CALLS"]).read_text()
        names = sorted(p.name for p in store.iterdir())
        hello = next(name for name in names if (store / name).read_text().endswith(HELLO))
        core = next(name for name in names if "# ---- lib/core.sh ----" in (store / name).read_text())
        (store / hello).unlink()
        (store / core).write_text("echo damaged\n")
        failed = up(301, 3, check=False)
        assert failed.returncode != 0 and mark.read_text() == "1 300\n2 301\n"
        advised = re.search(r"missing or changed; \./pulumi\.sh up --stack store (.+) ships them", failed.output)
        assert advised, failed.output
        up(301, 3, *shlex.split(advised[1]))
        assert mark.read_text() == "1 300\n2 301\n3 301\n"
        # After that update too (a replace that made the new one first would delete it at the end).
        assert {hello, core} <= {p.name for p in store.iterdir()} and intact()
        up(301, 4)
        assert mark.read_text().endswith("3 301\n4 301\n")
    finally:
        engine.destroy()
    assert not (state_dir / "c").exists()


def rsa_4096_key(seed: int) -> str:
    """An OpenSSH RSA-4096 public key line (e 65537, a 4096-bit modulus; made, not generated:
    the config checks the form, not the primes)."""

    def string(data: bytes) -> bytes:
        return len(data).to_bytes(4, "big") + data

    modulus = random.Random(seed).getrandbits(4096) | (1 << 4095) | 1
    blob = string(b"ssh-rsa") + string((65537).to_bytes(3, "big")) + string(b"\0" + modulus.to_bytes(512, "big"))
    return f"ssh-rsa {base64.b64encode(blob).decode()} person{seed}@workstation-{seed}.example.org"


def people(count: int) -> list[dict]:
    return [
        {"name": f"p{i:04d}", "uid": 2000 + i, "gid": 2000 + i, "ssh_keys": [rsa_4096_key(i)]} for i in range(count)
    ]


def test_a_text_over_one_arguments_cap_runs_with_its_stdin(tmp_path):
    """A login node's PEOPLE for 500 people with an RSA-4096 key each is over Linux's cap on one
    argument (128 KiB): the stub still runs it, the script reads every byte of it, its own
    stdin (where secrets travel), $0 and no positional parameter, as under `bash -c TEXT`."""
    value = render_people(tuple(UserConfig.model_validate(p) for p in people(500)))
    assert len(value.encode()) > 131072
    parts = [
        env_part("PEOPLE", value),
        Part("lib/core.sh", "set -euo pipefail\n"),
        # A program it starts reads the value by a pipe: the environment cannot hold it (E2BIG).
        Part(
            "login_create.sh", 'printf "%s|" "$(printf %s "$PEOPLE" | sha256sum)" "$(cat)" "$0" "$#" "${text-unset}"\n'
        ),
    ]
    store = tmp_path / "scripts"
    ship(store, parts)
    with pytest.raises(OSError) as refused:  # the whole text as one argument, as the stub did
        run("".join(part.text for part in parts), "the secret")
    assert refused.value.errno == errno.E2BIG
    done = run(stub(str(store), parts), "the secret", {"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    digest = hashlib.sha256(value.encode()).hexdigest()
    assert done.stdout == f"{digest}  -|the secret|/bin/bash|0|unset|"


def test_a_file_gone_between_the_check_and_the_read_runs_nothing(tmp_path):
    """`sha256sum` passes, then the script's file goes (a stand-in `sha256sum` removes it): the
    stub stops before any part runs, instead of running the helpers alone."""
    store = tmp_path / "scripts"
    parts = [Part("lib/core.sh", "echo helpers ran\n"), Part("x_create.sh", "echo script ran\n")]
    ship(store, parts)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sha256sum").write_text(f'#!/bin/sh\n/usr/bin/sha256sum "$@" && rm {store / parts[1].name}\n')
    (bin_dir / "sha256sum").chmod(0o755)
    done = run(stub(str(store), parts), env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    assert done.returncode == 1 and done.stdout == ""
    assert f"script store {store}: its files could not be read" in done.stderr


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


def test_the_bound_holds_at_64_nodes_with_500_people_on_a_login_node():
    """What grows with the cluster (slurm.conf, the preflight's and boot unit's lists of nodes,
    the people and their keys) goes to the store, so no command's inputs grow with the node or
    people count beyond the bound."""
    config = bench_config(64)
    config["cluster"]["users"] = people(500)
    config["cluster"]["login"] = {"nat_address": "10.61.3.250"}
    found = run_program(config, stack="bench")
    size, name = _largest(found)
    assert size <= BOUND, f"{name} keeps {size} bytes of inputs at 64 nodes and 500 people"
    login = found.by_name("bench-login-setup")
    assert len(login.inputs["environment"]["PEOPLE"].encode()) > 131072


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
