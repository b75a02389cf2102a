"""The real Pulumi engine, for the tests that run it: the pinned CLI (tools/pulumi-cli.sh), its
Python language host and the pulumi-command provider plugin (in the self-built providers' own
PULUMI_HOME, `tools/pulumi-cli.sh home`), against a local file backend in a temporary directory
with a generated passphrase.

Each Engine works on a copy of the project (the program, the stack files, the venv linked), so
what the CLI writes into a stack file (`encryptionsalt`, `secure:` values) never touches the
repository's files. `ready()` says what is missing when the engine cannot run here.
"""

import json
import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml

from components.lxc.node_image import third_party
from tests.harness.program_harness import ROOT
from tools import parallelism

COMMAND_PLUGIN = "1.2.1"  # the provider version the pulumi-command package pins (requirements.txt)
PROJECT_FILES = ("Pulumi.yaml", "__main__.py", "components", "stacks", "requirements.txt")
# The engine's step operations, folded into the harness's actions.
OPS = {
    "same": "same",
    "create": "create",
    "update": "update",
    "replace": "replace",
    "create-replacement": "replace",
    "delete-replaced": "replace",
    "delete": "delete",
}


def diagnostics(output: str) -> str:
    """The CLI's `Diagnostics:` section (what failed, per resource), which a failure's message
    puts first: the progress before it can be long enough that a report keeps only its ends."""
    start = output.find("\nDiagnostics:\n")
    if start < 0:
        return ""
    ends = [i for i in (output.find(f"\n{word}:\n", start + 1) for word in ("Outputs", "Resources")) if i > 0]
    return output[start + 1 : min(ends, default=len(output))].rstrip() + "\n"


def cli_dir() -> Path | None:
    """The folder of the pinned CLI, found without downloading or building anything."""
    done = subprocess.run(
        [str(ROOT / "tools" / "pulumi-cli.sh")],
        capture_output=True,
        text=True,
        env={**os.environ, "PULUMI_CLI_URL": "http://127.0.0.1:9/unreachable", "PULUMI_CLI_BUILD": "no"},
        check=False,
    )
    return Path(done.stdout.strip()) if done.returncode == 0 else None


def pulumi_home() -> Path:
    """The PULUMI_HOME of the tests: the self-built providers' own (tools/pulumi-cli.sh home),
    never the user's ~/.pulumi, which every other Pulumi project of the user reads."""
    done = subprocess.run([str(ROOT / "tools" / "pulumi-cli.sh"), "home"], capture_output=True, text=True, check=True)
    return Path(done.stdout.strip())


def ready() -> str | None:
    """None when the engine can run this program here, else what is missing."""
    folder = cli_dir()
    if folder is None:
        return "no Pulumi CLI of the pinned version (tools/pulumi-cli.sh build makes one from its Go modules)"
    for name in ("pulumi-language-python", "pulumi-language-python-exec"):
        if not (folder / name).exists():
            return f"no Python language host beside the CLI ({folder / name})"
    listed = subprocess.run(
        [str(folder / "pulumi"), "plugin", "ls", "--json"],
        capture_output=True,
        text=True,
        env={**os.environ, "PULUMI_SKIP_UPDATE_CHECK": "true", "PULUMI_HOME": str(pulumi_home())},
        check=False,
    )
    plugins = json.loads(listed.stdout or "[]")
    if not any(p["name"] == "command" and p["version"] == COMMAND_PLUGIN for p in plugins):
        install = f"PULUMI_HOME={pulumi_home()} pulumi plugin install resource command {COMMAND_PLUGIN} --file BINARY"
        return f"no pulumi-command provider plugin v{COMMAND_PLUGIN} (tools/pulumi-cli.sh build, or `{install}`)"
    return None


@dataclass
class Update:
    """One engine run: its exit status, output and the steps of its event log."""

    returncode: int
    output: str
    events: list[dict]

    def steps(self, custom_only: bool = True) -> list[tuple[str, str]]:
        """(operation, resource name) in the order the engine started them."""
        found = []
        for event in self.events:
            pre = event.get("resourcePreEvent")
            if not pre:
                continue
            meta = pre["metadata"]
            if custom_only and not meta["type"].startswith("command:"):
                continue
            found.append((meta["op"], meta["urn"].rsplit("::", 1)[1]))
        return found

    def actions(self) -> dict[str, str]:
        """The action per command resource, as the harness names them."""
        actions: dict[str, str] = {}
        for op, name in self.steps():
            action = OPS.get(op, op)
            if actions.get(name) != "replace":
                actions[name] = action
        return actions

    def deleted_first(self) -> set[str]:
        """The replaced command resources whose old copy the engine deleted before it created
        the new one (delete-before-replace, or replaced along with such a resource)."""
        order = self.steps()
        return {
            name
            for op, name in order
            if op == "delete-replaced"
            and ("create-replacement", name) in order
            and order.index((op, name)) < order.index(("create-replacement", name))
        }


class Engine:
    def __init__(self, workdir: Path, stack: str, revision: str | None = None):
        self.stack = stack
        self.project = workdir / "project"
        self.state = workdir / "state"
        self.logs = workdir / "events"
        for path in (self.project, self.state, self.logs):
            path.mkdir(parents=True)
        self.use_program(revision)
        (self.project / "venv").symlink_to(ROOT / "venv")
        folder = cli_dir()
        assert folder is not None, ready()
        self.env = {
            **os.environ,
            "PATH": f"{folder}:{os.environ['PATH']}",
            "PULUMI_BACKEND_URL": f"file://{self.state}",
            "PULUMI_CONFIG_PASSPHRASE": secrets.token_urlsafe(24),
            "PULUMI_SKIP_UPDATE_CHECK": "true",
            # The self-built providers' own home (tools/pulumi-cli.sh home), not the user's.
            "PULUMI_HOME": str(pulumi_home()),
            # `--event-log` (the engine's steps as JSON, what the harness is compared with) is a
            # flag of the CLI's debug commands.
            "PULUMI_DEBUG_COMMANDS": "true",
            # Offline: plugins the program's packages name but never use (aws, tls, kubernetes)
            # are not fetched; one the program does use and that is missing still fails.
            "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
            # The program's copy is not beside shared/third_party: Enroot's and Pyxis' sources.
            "PULUMI_PLUGIN_SOURCES": str(third_party()),
        }
        self.runs = 0

    def use_program(self, revision: str | None = None) -> None:
        """The program of the working tree, or of a git revision (an earlier release): its files
        replace the project's, the stack files stay as the CLI left them."""
        self.revision = revision
        stacks = self.project / "stacks"
        kept = {p.name: p.read_text() for p in stacks.glob("Pulumi.*.yaml")} if stacks.exists() else {}
        for name in PROJECT_FILES:
            target = self.project / name
            if target.is_dir():
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()
        if revision is None:
            for name in PROJECT_FILES:
                source = ROOT / name
                (shutil.copytree if source.is_dir() else shutil.copy2)(source, self.project / name)
        else:
            archive = subprocess.run(
                ["git", "-C", str(ROOT), "archive", revision, *PROJECT_FILES], capture_output=True, check=True
            ).stdout
            subprocess.run(["tar", "-x", "-C", str(self.project)], input=archive, check=True)
        for name, text in kept.items():
            (stacks / name).write_text(text)

    @property
    def stack_file(self) -> Path:
        return self.project / "stacks" / f"Pulumi.{self.stack}.yaml"

    def write_config(self, config: dict) -> None:
        """Replace the stack file's `gpu-cluster:*` values, keeping what the CLI wrote there."""
        document = yaml.safe_load(self.stack_file.read_text()) or {}
        document["config"] = {
            k: v for k, v in (document.get("config") or {}).items() if not k.startswith("gpu-cluster:")
        }
        document["config"].update({f"gpu-cluster:{key}": value for key, value in config.items()})
        self.stack_file.write_text(yaml.safe_dump(document, sort_keys=False))

    def pulumi(
        self, *args: str, check: bool = True, timeout: int = 1200, stdin: str | None = None
    ) -> subprocess.CompletedProcess:
        env = self.env
        if (
            args
            and args[0] in parallelism.COMMANDS
            and parallelism.env_parallel(env) is None
            and self.stack_file.exists()
        ):
            # As ./pulumi.sh runs them: the cluster's steps at once (tools/parallelism.py),
            # unless PULUMI_PARALLEL (or a --parallel argument) says otherwise.
            env = {**env, "PULUMI_PARALLEL": str(parallelism.for_stack_file(self.stack_file)[0])}
        done = subprocess.run(
            ["pulumi", *args],
            cwd=self.project,
            env=env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"pulumi {' '.join(args)} failed ({done.returncode}):\n{diagnostics(done.stdout)}"
                f"--- its whole output:\n{done.stdout}\n{done.stderr}"
            )
        return done

    def init(self) -> None:
        self.pulumi("stack", "init", self.stack)

    def set_secret(self, key: str, value: str) -> None:
        """`pulumi config set --secret gpu-cluster:KEY` (the value passed on stdin)."""
        self.pulumi("config", "set", "--secret", f"gpu-cluster:{key}", "--stack", self.stack, stdin=value)

    def resource_urns(self) -> list[str]:
        """The URNs of the resources in the stack's state."""
        return [resource["urn"] for resource in self.resources()]

    def resources(self) -> list[dict]:
        """The resources in the stack's state (`pulumi stack export`): urn, outputs, ..."""
        deployment = json.loads(self.export()).get("deployment") or {}
        return list(deployment.get("resources") or [])

    def _with_events(self, verb: str, *args: str, check: bool = True, timeout: int = 1200) -> Update:
        self.runs += 1
        log = self.logs / f"{self.runs:02d}-{verb}.jsonl"
        done = self.pulumi(
            verb, "--stack", self.stack, "--yes", "--event-log", str(log), *args, check=check, timeout=timeout
        )
        events = [json.loads(line) for line in log.read_text().splitlines() if line.strip()] if log.exists() else []
        return Update(done.returncode, done.stdout + done.stderr, events)

    def up(self, *args: str, check: bool = True, timeout: int = 1200) -> Update:
        return self._with_events("up", "--skip-preview", *args, check=check, timeout=timeout)

    def preview(self, *args: str) -> Update:
        self.runs += 1
        log = self.logs / f"{self.runs:02d}-preview.jsonl"
        done = self.pulumi("preview", "--stack", self.stack, "--event-log", str(log), *args)
        events = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        return Update(done.returncode, done.stdout + done.stderr, events)

    def refresh(self, *args: str) -> Update:
        return self._with_events("refresh", "--skip-preview", *args)

    def destroy(self, *args: str, check: bool = True, timeout: int = 1200) -> Update:
        return self._with_events("destroy", "--skip-preview", *args, check=check, timeout=timeout)

    def export(self) -> str:
        return self.pulumi("stack", "export", "--stack", self.stack).stdout

    def outputs(self) -> dict:
        return json.loads(self.pulumi("stack", "output", "--stack", self.stack, "--json").stdout)
