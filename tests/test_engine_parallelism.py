"""The harness runs as many steps at once as the pinned CLI does with the same settings.

tests/harness/command_executor.py limits its steps as the CLI does (`cli_parallel`: --parallel,
else PULUMI_PARALLEL, else 4 x GOMAXPROCS). Pinned here against the real CLI: the default its
commands report, and real `pulumi up` runs of a tiny program of local commands that record how
many of them run at once (tests/harness/concurrency.py), beside the harness's run of the same
commands under the same settings. A few seconds per run; nothing outside a temporary folder.
"""

import json
import os
import re
import secrets
import subprocess
from pathlib import Path

import pytest

from tests.harness import concurrency
from tests.harness.command_executor import HostCommand, apply, cli_parallel
from tests.harness.engine import cli_dir, pulumi_home, ready
from tests.harness.program_harness import ROOT

pytestmark = pytest.mark.engine

PROGRAM = """import json
import pulumi_command

for i, script in enumerate(json.load(open("scripts.json"))):
    pulumi_command.local.Command(f"n{i}", create=script)
"""
# The CLI's own settings, cleared: each case sets what it tests.
SETTINGS = ("PULUMI_PARALLEL", "GOMAXPROCS")


def cli_env(**settings: str) -> dict[str, str]:
    missing = ready()
    assert missing is None, f"the real engine cannot run here: {missing}"
    env = {key: value for key, value in os.environ.items() if key not in SETTINGS}
    return env | {
        "PATH": f"{cli_dir()}:{os.environ['PATH']}",
        "PULUMI_HOME": str(pulumi_home()),
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
        **settings,
    }


def reported_default(command: str, env: dict[str, str]) -> int:
    """The `--parallel` default the CLI's command reports (`pulumi COMMAND --help`)."""
    shown = subprocess.run(["pulumi", command, "--help"], env=env, capture_output=True, text=True, check=True)
    return int(re.search(r"--parallel int32 .*\(default (\d+)\)", shown.stdout).group(1))


@pytest.mark.parametrize(
    "settings",
    [{}, {"PULUMI_PARALLEL": "5"}, {"PULUMI_PARALLEL": "0"}, {"PULUMI_PARALLEL": "x"}, {"GOMAXPROCS": "3"}],
)
def test_the_harness_s_default_is_the_cli_s(settings):
    env = cli_env(**settings)
    commands = ("up", "preview", "destroy", "refresh") if not settings else ("up",)
    for command in commands:
        assert reported_default(command, env) == cli_parallel(environ=env), (command, settings)


def engine_peak(tmp_path: Path, scripts: list[str], env: dict[str, str], *args: str) -> None:
    """`pulumi up` of a new stack of a program whose local commands run `scripts`."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "Pulumi.yaml").write_text(
        f"name: parallelism\nruntime:\n  name: python\n  options:\n    virtualenv: {ROOT / 'venv'}\n"
    )
    (project / "__main__.py").write_text(PROGRAM)
    (project / "scripts.json").write_text(json.dumps(scripts))
    (tmp_path / "state").mkdir()
    env = env | {"PULUMI_BACKEND_URL": f"file://{tmp_path / 'state'}", "PULUMI_CONFIG_PASSPHRASE": secrets.token_hex(8)}

    def pulumi(*argv: str) -> None:
        done = subprocess.run(["pulumi", *argv], cwd=project, env=env, capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, f"pulumi {' '.join(argv)}:\n{done.stdout}\n{done.stderr}"

    pulumi("stack", "init", "t")
    pulumi("up", "--yes", "--skip-preview", "--stack", "t", *args)


@pytest.mark.parametrize(
    ("settings", "parallel"),
    [({}, None), ({"PULUMI_PARALLEL": "3"}, None), ({"PULUMI_PARALLEL": "3"}, 5)],
    ids=["default", "PULUMI_PARALLEL", "--parallel-over-PULUMI_PARALLEL"],
)
def test_the_engine_and_the_harness_run_as_many_steps_at_once(tmp_path, monkeypatch, settings, parallel):
    env = cli_env(**settings)
    expected = cli_parallel(parallel, environ=env)
    if expected > 24:  # a many-core machine: bounded by GOMAXPROCS, the same formula
        env["GOMAXPROCS"] = "2"
        expected = cli_parallel(parallel, environ=env)
    count = expected + 2
    # The engine: count local commands, with the settings and --parallel as given.
    engine_folder = tmp_path / "engine"
    scripts = [concurrency.script(engine_folder, expected)] * count
    engine_peak(tmp_path, scripts, env, *(["--parallel", str(parallel)] if parallel is not None else []))
    assert concurrency.started(engine_folder) == count
    # The harness: the same commands under the same settings.
    for name in ("PULUMI_PARALLEL", "GOMAXPROCS"):
        monkeypatch.delenv(name, raising=False)
        if name in env:
            monkeypatch.setenv(name, env[name])
    harness_folder = tmp_path / "harness"
    script = concurrency.script(harness_folder, expected)
    commands = [
        HostCommand(f"n{i}", f"urn:n{i}", script, None, None, {}, ("/bin/sh", "-c"), frozenset()) for i in range(count)
    ]
    apply(commands, parallel=parallel)
    assert (concurrency.peak(engine_folder), concurrency.peak(harness_folder)) == (expected, expected)
