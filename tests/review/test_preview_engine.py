"""The pull-request preview (`python -m review.preview`) against the real engine: the pinned CLI,
its Python language host and the pulumi-command provider, through the Automation API, on a
local file backend. A preview changes nothing on any host, so this runs without root's
clusters; `twohost`'s second host is never dialed by a preview.
"""

import os
import shutil
import subprocess
import sys

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from tests.harness.engine import Engine, cli_dir, ready
from tests.harness.program_harness import FIXTURES, ROOT, run_program, stack_config

pytestmark = pytest.mark.engine
# What the harness sets for its own engine runs, and a user's shell has not.
ENGINE_ONLY = ("PULUMI_HOME", "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION", "PULUMI_DEBUG_COMMANDS")


def ssh_key() -> str:
    return (
        ed25519.Ed25519PrivateKey.generate()
        .private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption())
        .decode()
    )


@pytest.mark.parametrize(("stack", "secrets"), [("nogpu", {}), ("twohost", {"gpu2SshKey": ssh_key})])
def test_the_preview_of_a_new_stack_counts_every_resource_the_program_registers(tmp_path, stack, secrets):
    missing = ready()
    assert missing is None, f"the real engine cannot run here: {missing}"
    engine = Engine(tmp_path, stack)
    # The tests' copy of the stack (a site may edit stacks/), the review package and the tools
    # it finds the CLI with.
    shutil.copy2(FIXTURES / f"Pulumi.{stack}.yaml", engine.stack_file)
    for folder in ("review", "tools"):
        shutil.copytree(ROOT / folder, engine.project / folder)
    engine.init()
    values = {key: make() for key, make in secrets.items()}
    for key, value in values.items():
        engine.set_secret(key, value)
    out = tmp_path / "out"
    # As a user runs it: no CLI on PATH, no PULUMI_HOME, a HOME whose ~/.pulumi holds no plugin
    # (only the kept cache is named, as HOME moved). review.preview finds the pinned CLI and the
    # kept cache's pulumi-command provider itself, as ./pulumi.sh does, and downloads nothing.
    home = tmp_path / "home"
    home.mkdir()
    as_a_user = {key: value for key, value in engine.env.items() if key not in ENGINE_ONLY} | {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "PULUMI_CLI_CACHE": str(cli_dir().parent),
        "PULUMI_CLI_BUILD": "no",
        "PULUMI_CLI_URL": "http://127.0.0.1:9/unreachable",
    }
    done = subprocess.run(
        [sys.executable, "-m", "review.preview", stack, "--out", str(out)],
        cwd=engine.project,
        env=as_a_user,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (home / ".pulumi").exists(), sorted(str(p) for p in home.rglob("*"))[:20]
    # The engine counts what the program registers, the stack itself included.
    registered = run_program(stack_config(stack), stack=stack, secrets=values).resources
    expected = len(registered) + 1
    assert done.stdout.strip() == f"`{stack}`: {expected} to create, 0 to update, 0 to replace, 0 to delete"
    comment = (out / "comment.md").read_text()
    assert f"### `{stack}`: {expected} to create" in comment and "The preview failed" not in comment
    rows = {line.split("`")[1] for line in comment.splitlines() if line.startswith("| create | `")}
    assert {r.name for r in registered} <= rows, {r.name for r in registered} - rows
    assert (out / "labels").read_text() == ""
    preview = (out / "preview.txt").read_text()
    assert f"+ {expected} to create" in preview
    for value in values.values():  # the secret is neither in the comment nor in the text
        assert value.splitlines()[1] not in comment + preview
