"""The newcomer's path: ./up.sh, ./pulumi.sh, ./down.sh and the pinned CLI (tools/pulumi-cli.sh).

The scripts run for real in a copy of the project, with a stand-in `pulumi` on PATH that
records its arguments and environment; the commands of the README and docs/ are run as written. Nothing
here reaches the network: downloads go to a closed local port or to fake tarballs.
"""

import hashlib
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import tarfile
from pathlib import Path

import pytest

from review.preview import cli_environment
from tests.harness.docs import bash_lines, doc_files
from tests.harness.program_harness import ROOT

INSTALLER = ROOT / "tools" / "pulumi-cli.sh"
PINNED = re.search(r"^VERSION=(\S+)$", INSTALLER.read_text(), re.M).group(1)
PINNED_SHA256 = re.search(r"^SHA256=([0-9a-f]{64})$", INSTALLER.read_text(), re.M).group(1)
TARBALL = f"pulumi-v{PINNED}-linux-x64.tar.gz"
PROJECT_FILES = [
    "up.sh",
    "pulumi.sh",
    "down.sh",
    "tools",
    "requirements.txt",
    "requirements.lock",
    "Pulumi.yaml",
    "stacks",
]
# A port nothing listens on: the download fails at once, as it does without network.
UNREACHABLE = f"http://127.0.0.1:9/{TARBALL}"

STAND_IN = """#!/usr/bin/env python3
import json, os, sys
if sys.argv[1:] == ["version"]:
    print("v{version}")
    sys.exit(0)
file = os.environ.get("PULUMI_CONFIG_PASSPHRASE_FILE")
with open({record!r}, "a") as out:
    out.write(json.dumps({{
        "executable": sys.argv[0],
        "argv": sys.argv[1:],
        "cwd": os.getcwd(),
        "backend": os.environ.get("PULUMI_BACKEND_URL"),
        "pulumi_home": os.environ.get("PULUMI_HOME"),
        "passphrase_set": "PULUMI_CONFIG_PASSPHRASE" in os.environ,
        "passphrase_file": file,
        "passphrase_file_mode": oct(os.stat(file).st_mode & 0o777) if file and os.path.exists(file) else None,
        "passphrase_file_size": os.path.getsize(file) if file and os.path.exists(file) else None,
        "parallel": os.environ.get("PULUMI_PARALLEL"),
    }}) + "\\n")
"""


class Project:
    """A copy of the project's scripts with a stand-in `pulumi` on PATH (or none)."""

    def __init__(self, tmp_path: Path, *, stand_in_on_path: bool = True):
        self.dir = tmp_path / "project"
        self.dir.mkdir()
        for name in PROJECT_FILES:
            source = ROOT / name
            if source.is_dir():
                shutil.copytree(source, self.dir / name)
            else:
                shutil.copy2(source, self.dir / name)
        # The real venv: up.sh finds its locked packages installed and pip changes nothing.
        (self.dir / "venv").symlink_to(ROOT / "venv")
        self.record = tmp_path / "pulumi-calls.jsonl"
        self.bin = tmp_path / "bin"
        self.bin.mkdir()
        if stand_in_on_path:
            write_stand_in(self.bin / "pulumi", self.record)
        self.env = {"PATH": f"{self.bin}:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(tmp_path), "LC_ALL": "C"}
        # The Python that made the real venv, as the distribution's: ensure_venv keeps the link
        # where a developer's venv came from another python3 (that choice is tested below).
        made_by = re.search(r"^executable = (.+)$", (ROOT / "venv" / "pyvenv.cfg").read_text(), re.M)
        if made_by:
            self.env["DISTRO_PYTHON3"] = made_by.group(1)

    def run(self, command: str, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", "-c", command],
            cwd=self.dir,
            env={**self.env, **env},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def calls(self) -> list[dict]:
        if not self.record.exists():
            return []
        calls = [json.loads(line) for line in self.record.read_text().splitlines()]
        self.record.unlink()
        return calls

    @property
    def state(self) -> Path:
        return self.dir / ".pulumi-state"

    @property
    def generated_passphrase(self) -> Path:
        """Where pulumi.sh keeps the passphrase it generates: under $HOME, named by the state."""
        digest = hashlib.sha256(str(self.state).encode()).hexdigest()[:12]
        return Path(self.env["HOME"]) / ".config" / "gpucluster" / f"passphrase-{digest}"


def write_stand_in(path: Path, record: Path) -> None:
    path.write_text(STAND_IN.format(version=PINNED, record=str(record)))
    path.chmod(0o755)


def fake_tarball(path: Path, record: Path, *, tamper: bool = False) -> str:
    """A release-shaped tarball (pulumi/pulumi inside); returns its SHA-256 (of the untampered file)."""
    stand_in = path.parent / "stand-in-pulumi"
    write_stand_in(stand_in, record)
    with tarfile.open(path, "w:gz") as tar:
        tar.add(stand_in, arcname="pulumi/pulumi")
        tar.add(stand_in, arcname="pulumi/pulumi-language-python")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if tamper:
        with path.open("ab") as out:
            out.write(b"\0")
    return digest


def assert_wrapped(call: dict, project: Project) -> None:
    """Every call goes to the project's own state with a passphrase file only root can read."""
    assert call["backend"] == f"file://{project.dir}/.pulumi-state"
    assert call["cwd"] == str(project.dir)
    assert call["passphrase_set"] or call["passphrase_file"], "pulumi ran without a passphrase"
    if not call["passphrase_set"]:
        assert call["passphrase_file"] == str(project.generated_passphrase)
        assert call["passphrase_file_mode"] == "0o600"
        assert call["passphrase_file_size"] > 20


# ---- the pinned CLI: download, checksum, unpack ----


def test_the_pin_is_a_version_and_a_sha256_of_the_release_tarball():
    text = INSTALLER.read_text()
    assert re.fullmatch(r"\d+\.\d+\.\d+", PINNED)
    assert "https://github.com/pulumi/pulumi/releases/download/v$VERSION/$TARBALL_NAME" in text
    assert "NOT verified on the machines" in text


def test_the_sdk_and_the_command_plugin_are_pinned_with_the_cli():
    """One engine version everywhere: the SDK in requirements.txt is the CLI's version, and the
    pulumi-command package is the version of the provider plugin the engine tests load."""
    from tests.harness.engine import COMMAND_PLUGIN

    requirements = (ROOT / "requirements.txt").read_text()
    assert re.search(rf"^pulumi=={re.escape(PINNED)}\b", requirements, re.M), "requirements.txt pins another SDK"
    assert re.search(rf"^pulumi-command=={re.escape(COMMAND_PLUGIN)}\b", requirements, re.M)


def test_install_unpacks_a_tarball_whose_sha256_matches(tmp_path):
    good = tmp_path / TARBALL
    digest = fake_tarball(good, tmp_path / "calls.jsonl")
    dest = tmp_path / "cli" / f"v{PINNED}"
    for source in (str(good), f"file://{good}"):
        done = subprocess.run([INSTALLER, "install", source, digest, dest], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert sorted(p.name for p in dest.iterdir()) == ["pulumi", "pulumi-language-python"]
        out = subprocess.run([dest / "pulumi", "version"], capture_output=True, text=True, check=True).stdout
        assert out.strip() == f"v{PINNED}"


def test_install_refuses_a_tampered_tarball_and_unpacks_nothing(tmp_path):
    bad = tmp_path / TARBALL
    digest = fake_tarball(bad, tmp_path / "calls.jsonl", tamper=True)
    dest = tmp_path / "cli" / f"v{PINNED}"
    done = subprocess.run([INSTALLER, "install", bad, digest, dest], capture_output=True, text=True)
    assert done.returncode == 3
    assert f"SHA-256 mismatch for {bad}" in done.stderr and "nothing was unpacked" in done.stderr
    assert not dest.exists() and not dest.parent.exists()


def test_install_reports_an_unreadable_source(tmp_path):
    dest = tmp_path / "cli"
    for source in (UNREACHABLE, str(tmp_path / "missing.tar.gz")):
        done = subprocess.run([INSTALLER, "install", source, PINNED_SHA256, dest], capture_output=True, text=True)
        assert done.returncode == 2, done.stderr
        assert not dest.exists()


def test_offline_up_says_what_to_do_and_changes_nothing(tmp_path):
    project = Project(tmp_path, stand_in_on_path=False)
    done = project.run("./up.sh local", PULUMI_CLI_URL=UNREACHABLE)
    assert done.returncode == 1
    message = done.stderr[done.stderr.index("error: could not download") :]
    assert message == (
        f"error: could not download the Pulumi CLI v{PINNED} from\n"
        f"  {UNREACHABLE}\n"
        "Without network access to it, do one of:\n"
        f"  - fetch {TARBALL} by other means, then\n"
        f"      PULUMI_TARBALL=/path/to/{TARBALL} ./up.sh STACK\n"
        f"  - put pulumi v{PINNED} on PATH (found: none)\n"
        "  - point PULUMI_CLI_URL at a mirror of that file\n"
        "  - with Go and a Go module proxy: tools/pulumi-cli.sh build\n"
        f"The file must have SHA-256 {PINNED_SHA256}.\n"
    )
    # It stops before the venv, the state or any pulumi command.
    assert not (project.dir / ".pulumi-cli").exists() and not project.state.exists()


def test_offline_message_names_a_pulumi_of_another_version(tmp_path):
    project = Project(tmp_path, stand_in_on_path=False)
    other = project.bin / "pulumi"
    other.write_text("#!/bin/sh\necho v3.1.0\n")
    other.chmod(0o755)
    done = project.run("./pulumi.sh stack ls", PULUMI_CLI_URL=UNREACHABLE)
    assert done.returncode == 1
    assert f"  - put pulumi v{PINNED} on PATH (found: v3.1.0 at {other})\n" in done.stderr


def test_a_tarball_given_offline_is_checked_against_the_pinned_sha256(tmp_path):
    project = Project(tmp_path, stand_in_on_path=False)
    tarball = tmp_path / TARBALL
    fake_tarball(tarball, project.record)  # not the real release: its SHA-256 differs from the pin
    done = project.run("./pulumi.sh stack ls", PULUMI_TARBALL=str(tarball))
    assert done.returncode == 1
    assert f"expected {PINNED_SHA256}" in done.stderr
    assert f"PULUMI_TARBALL={tarball} is not {TARBALL}" in done.stderr
    assert not (project.dir / ".pulumi-cli").exists() and project.calls() == []


def assert_previews_run_the_cli_as_the_wrapper(project: Project, call: dict, **env: str) -> None:
    """review.preview's environment (`tools/pulumi-cli.sh env`) is the one ./pulumi.sh ran
    `call` in: the same CLI first on PATH, the same PULUMI_HOME (or none)."""
    environ = {**project.env, **env}
    listed = project.run("tools/pulumi-cli.sh env", **env)
    assert listed.returncode == 0, listed.stderr
    expected = f"cli_dir={Path(call['executable']).parent}\n"
    if call["pulumi_home"] is not None:
        expected += f"PULUMI_HOME={call['pulumi_home']}\n"
    assert listed.stdout == expected
    previews = cli_environment(project.dir, environ)
    assert previews["PATH"] == f"{Path(call['executable']).parent}:{environ['PATH']}"
    assert previews.get("PULUMI_HOME") == call["pulumi_home"]


def test_the_wrapper_uses_the_cli_installed_in_the_project(tmp_path):
    project = Project(tmp_path, stand_in_on_path=False)
    tarball = tmp_path / TARBALL
    digest = fake_tarball(tarball, project.record)
    cli = project.dir / ".pulumi-cli" / f"v{PINNED}"
    subprocess.run([INSTALLER, "install", tarball, digest, cli], check=True)
    done = project.run("./pulumi.sh stack ls --json", PULUMI_CLI_URL=UNREACHABLE)
    assert done.returncode == 0, done.stderr
    [call] = project.calls()
    assert call["executable"] == str(cli / "pulumi") and call["argv"] == ["stack", "ls", "--json"]
    assert call["pulumi_home"] is None  # a release CLI: the user's own home, release plugins
    assert_wrapped(call, project)
    assert_previews_run_the_cli_as_the_wrapper(project, call, PULUMI_CLI_URL=UNREACHABLE)


def test_the_self_built_kubernetes_provider_goes_to_the_kept_home_never_the_user_s(tmp_path):
    """tools/k8s-control-plane.sh installs its provider (built at the official version number)
    into the self-built pieces' PULUMI_HOME, as tools/pulumi-cli.sh does the command provider."""
    project = Project(tmp_path, stand_in_on_path=False)
    tarball = tmp_path / TARBALL
    digest = fake_tarball(tarball, project.record)
    cli = project.dir / ".pulumi-cli" / f"v{PINNED}"
    subprocess.run([INSTALLER, "install", tarball, digest, cli], check=True)
    shutil.copy2(ROOT / "tools" / "k8s-control-plane.sh", project.dir / "tools")
    version = re.search(
        r"^KUBERNETES_PROVIDER_VERSION=(\S+)$", (ROOT / "tools" / "k8s-control-plane.sh").read_text(), re.M
    )[1]
    built = tmp_path / "k8s-plugin" / f"v{version}" / "pulumi-resource-kubernetes"
    built.parent.mkdir(parents=True)
    built.write_text("#!/bin/sh\n")
    built.chmod(0o755)
    (project.bin / "go").write_text("#!/bin/sh\nexit 1\n")
    (project.bin / "go").chmod(0o755)
    cache = tmp_path / "cli-cache"
    env = {"PULUMI_CLI_CACHE": str(cache), "PULUMI_KUBERNETES_CACHE": str(tmp_path / "k8s-plugin")}
    done = project.run("tools/k8s-control-plane.sh plugin", **env)
    assert done.returncode == 0, done.stderr
    [install] = project.calls()
    assert install["argv"] == ["plugin", "install", "resource", "kubernetes", version, "--file", str(built)]
    assert install["pulumi_home"] == str(cache / f"v{PINNED}" / "home")
    assert not (tmp_path / ".pulumi").exists()


# ---- the CLI built from its Go modules, when the download is impossible ----

STAND_IN_GO = """#!/usr/bin/env python3
import os, sys
with open({record!r}, "a") as out:
    out.write(os.getcwd() + " " + " ".join(sys.argv[1:]) + "\\n")
    if sys.argv[1:3] == ["mod", "tidy"]:
        out.write(open("go.mod").read())
args = sys.argv[1:]
if args[0] == "build":
    target = args[args.index("-o") + 1]
    with open(target, "w") as out:
        out.write(open({pulumi!r}).read())
    os.chmod(target, 0o755)
"""
COMMAND_PLUGIN = re.search(r"^pulumi-command==(\S+)", (ROOT / "requirements.txt").read_text(), re.M).group(1)


def with_stand_in_go(project: Project, tmp_path: Path) -> Path:
    record = tmp_path / "go-calls.txt"
    write_stand_in(tmp_path / "built-pulumi", project.record)
    go = project.bin / "go"
    go.write_text(STAND_IN_GO.format(record=str(record), pulumi=str(tmp_path / "built-pulumi")))
    go.chmod(0o755)
    return record


def plugin_sources(tmp_path: Path) -> Path:
    """A sources folder shaped as ../shared/third_party: the language host and the provider."""
    sources = tmp_path / "third_party"
    host = sources / f"pulumi-v{PINNED}" / "sdk" / "python" / "cmd"
    (host / "pulumi-language-python").mkdir(parents=True)
    (host / "pulumi-language-python" / "main.go").write_text("package main\n")
    (host / "pulumi-language-python" / "go.mod").write_text(
        "module github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3\n"
    )
    (host / "pulumi-language-python-exec").write_text("#!/usr/bin/env python3\n")
    provider = sources / f"pulumi-command-v{COMMAND_PLUGIN}" / "provider"
    provider.mkdir(parents=True)
    (provider / "go.mod").write_text("module github.com/pulumi/pulumi-command/provider\n")
    return sources


def test_offline_the_engine_is_built_from_go_modules_and_sources_once_into_the_kept_cache(tmp_path):
    project = Project(tmp_path, stand_in_on_path=False)
    go_calls = with_stand_in_go(project, tmp_path)
    cache = tmp_path / "cli-cache"
    env = {
        "PULUMI_CLI_URL": UNREACHABLE,
        "PULUMI_CLI_CACHE": str(cache),
        "PULUMI_PLUGIN_SOURCES": str(plugin_sources(tmp_path)),
    }
    done = project.run("./pulumi.sh stack ls", **env)
    assert done.returncode == 0, done.stderr
    assert "the download is impossible from here: building the same version from its Go modules" in done.stderr
    built = cache / f"v{PINNED}"
    assert "building the Python language host" in done.stderr and "building the pulumi-command provider" in done.stderr
    install, call = project.calls()
    # The provider goes where the CLI looks for plugins, by the CLI's own `plugin install`: into
    # the kept cache's own PULUMI_HOME, never the user's ~/.pulumi (a self-built provider under
    # the official version number), and ./pulumi.sh runs the built CLI with that home.
    plugin = built / "plugins" / f"resource-command-v{COMMAND_PLUGIN}" / "pulumi-resource-command"
    assert install["argv"] == ["plugin", "install", "resource", "command", COMMAND_PLUGIN, "--file", str(plugin)]
    assert install["pulumi_home"] == str(built / "home") == call["pulumi_home"]
    assert project.run("tools/pulumi-cli.sh home", **env).stdout == f"{built / 'home'}\n"
    assert_previews_run_the_cli_as_the_wrapper(project, call, **env)
    assert call["executable"] == str(built / "pulumi") and call["argv"] == ["stack", "ls"]
    for name in ("pulumi-language-python", "pulumi-language-python-exec"):
        assert os.access(built / name, os.X_OK), name
    calls = go_calls.read_text().splitlines()
    assert any(f"-X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=v{PINNED}" in c for c in calls)
    assert any(f"-X github.com/pulumi/pulumi-command/provider/pkg/version.Version={COMMAND_PLUGIN}" in c for c in calls)
    # The throwaway module requires the pinned CLI and repeats its non-local replace line.
    assert f"require github.com/pulumi/pulumi/pkg/v3 v{PINNED}" in calls
    assert any(c.startswith("replace github.com/atotto/clipboard => github.com/tgummerer/clipboard") for c in calls)
    # The language host's copy takes the SDK and pkg from the proxy at the pinned version.
    edit = next(c for c in calls if " mod edit " in c)
    assert "-dropreplace=github.com/pulumi/pulumi/sdk/v3" in edit
    assert f"-require=github.com/pulumi/pulumi/sdk/v3@v{PINNED}" in edit
    assert not list(cache.rglob("*.new")) and sorted(p.name for p in cache.iterdir()) == [f"v{PINNED}"]
    # Kept: the next call builds nothing.
    go_calls.unlink()
    assert project.run("./pulumi.sh stack ls", **env).returncode == 0
    assert not go_calls.exists()
    (project.dir / "purge-kept.sh").write_text((ROOT / "purge-kept.sh").read_text())
    purged = project.run("bash ./purge-kept.sh --cli", PULUMI_CLI_CACHE=str(cache))
    assert purged.returncode == 0 and not cache.exists(), purged.stderr


def test_a_missing_source_folder_offline_says_what_is_missing_and_how_to_supply_it(tmp_path):
    project = Project(tmp_path, stand_in_on_path=False)
    with_stand_in_go(project, tmp_path)
    nowhere = tmp_path / "no-sources"
    done = project.run(
        "tools/pulumi-cli.sh build",
        PULUMI_CLI_CACHE=str(tmp_path / "cli-cache"),
        PULUMI_PLUGIN_SOURCES=str(nowhere),
    )
    assert done.returncode == 1
    assert (
        f"error: cannot build the Python language host: its source folder {nowhere}/pulumi-v{PINNED}/sdk/python/cmd"
        " does not exist." in done.stderr
    )
    assert "named by PULUMI_PLUGIN_SOURCES" in done.stderr
    assert f"github.com/pulumi/pulumi at tag v{PINNED}" in done.stderr
    assert f"pulumi plugin install resource command {COMMAND_PLUGIN}" in done.stderr
    assert not (tmp_path / "cli-cache" / f"v{PINNED}" / "pulumi-language-python").exists()


def test_offline_build_can_be_refused(tmp_path):
    project = Project(tmp_path, stand_in_on_path=False)
    go_calls = with_stand_in_go(project, tmp_path)
    done = project.run("./up.sh local", PULUMI_CLI_URL=UNREACHABLE, PULUMI_CLI_BUILD="no")
    assert done.returncode == 1 and "error: could not download the Pulumi CLI" in done.stderr
    assert not go_calls.exists()


# ---- the passphrase ----


def test_a_passphrase_file_is_generated_once_and_said_so(tmp_path):
    project = Project(tmp_path)
    first = project.run("./pulumi.sh stack ls")
    assert first.returncode == 0, first.stderr
    passphrase = project.generated_passphrase
    assert f"generated the passphrase protecting the stacks' secrets: {passphrase} (mode 0600)" in first.stderr
    assert stat.S_IMODE(passphrase.stat().st_mode) == 0o600
    assert stat.S_IMODE(passphrase.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(project.state.stat().st_mode) == 0o700
    # Apart from the state it protects: a copy of the state carries no key.
    assert not list(project.state.rglob("passphrase*"))
    content = passphrase.read_bytes()
    second = project.run("./pulumi.sh stack ls")
    assert "generated" not in second.stderr and passphrase.read_bytes() == content
    for call in project.calls():
        assert_wrapped(call, project)


def test_a_passphrase_left_inside_the_state_by_an_earlier_version_is_used_and_the_move_advised(tmp_path):
    project = Project(tmp_path)
    project.state.mkdir(mode=0o700)
    inside = project.state / "passphrase"
    inside.write_text("made earlier\n")
    inside.chmod(0o600)
    done = project.run("./pulumi.sh stack ls")
    assert done.returncode == 0, done.stderr
    [call] = project.calls()
    assert call["passphrase_file"] == str(inside)
    assert f"note: the passphrase sits inside the state it protects ({inside})" in done.stderr
    assert f"mv {inside} {project.generated_passphrase}" in done.stderr
    assert not project.generated_passphrase.exists() and inside.read_text() == "made earlier\n"


def test_the_same_checkout_through_a_symlink_uses_the_same_passphrase(tmp_path):
    """The passphrase is keyed on the physical path: reached through a symlink, the checkout
    opens its state with the passphrase generated before, and no second one is made."""
    project = Project(tmp_path)
    assert project.run("./pulumi.sh stack ls").returncode == 0
    link = tmp_path / "link"
    link.symlink_to(project.dir)
    done = project.run(f"cd {link} && ./pulumi.sh stack ls")
    assert done.returncode == 0, done.stderr
    assert "generated" not in done.stderr
    assert [p.name for p in project.generated_passphrase.parent.iterdir()] == [project.generated_passphrase.name]
    for call in project.calls():
        assert_wrapped(call, project)


def test_a_moved_checkout_finds_its_passphrase_by_the_name_recorded_in_its_state(tmp_path):
    project = Project(tmp_path)
    assert project.run("./pulumi.sh stack ls").returncode == 0
    passphrase = project.generated_passphrase
    assert (project.state / "key-name").read_text() == f"{passphrase.name}\n"
    project.calls()
    moved = tmp_path / "moved"
    project.dir.rename(moved)
    project.dir = moved
    done = project.run("./pulumi.sh stack ls")
    assert done.returncode == 0, done.stderr
    assert "generated" not in done.stderr
    [call] = project.calls()
    assert call["passphrase_file"] == str(passphrase)
    assert [p.name for p in passphrase.parent.iterdir()] == [passphrase.name]


def test_a_passphrase_an_earlier_version_keyed_on_a_symlinked_path_is_still_found(tmp_path):
    project = Project(tmp_path)
    link = tmp_path / "link"
    link.symlink_to(project.dir)
    digest = hashlib.sha256(f"{link}/.pulumi-state".encode()).hexdigest()[:12]
    older = project.generated_passphrase.parent / f"passphrase-{digest}"
    older.parent.mkdir(parents=True)
    older.write_text("made earlier\n")
    done = project.run(f"cd {link} && ./pulumi.sh stack ls")
    assert done.returncode == 0, done.stderr
    [call] = project.calls()
    assert call["passphrase_file"] == str(older) and "generated" not in done.stderr
    assert (project.state / "key-name").read_text() == f"{older.name}\n"
    # From then on the checkout's own path finds it too, through the recorded name.
    assert project.run("./pulumi.sh stack ls").returncode == 0
    [call] = project.calls()
    assert call["passphrase_file"] == str(older)


def test_a_passphrase_from_the_environment_is_used_as_given(tmp_path):
    project = Project(tmp_path)
    done = project.run("./pulumi.sh stack ls", PULUMI_CONFIG_PASSPHRASE="correct horse")
    assert done.returncode == 0, done.stderr
    [call] = project.calls()
    assert call["passphrase_set"] and call["passphrase_file"] is None
    assert not (project.state / "passphrase").exists() and not project.generated_passphrase.exists()

    given = tmp_path / "mine"
    given.write_text("battery staple\n")
    done = project.run("./pulumi.sh stack ls", PULUMI_CONFIG_PASSPHRASE_FILE=str(given))
    assert done.returncode == 0, done.stderr
    [call] = project.calls()
    assert call["passphrase_file"] == str(given) and not call["passphrase_set"]


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"PULUMI_CONFIG_PASSPHRASE": ""}, "error: PULUMI_CONFIG_PASSPHRASE is set but empty"),
        ({"PULUMI_CONFIG_PASSPHRASE_FILE": "/nonexistent"}, "PULUMI_CONFIG_PASSPHRASE_FILE=/nonexistent is missing"),
    ],
)
def test_an_empty_or_missing_passphrase_is_refused(tmp_path, env, message):
    project = Project(tmp_path)
    done = project.run("./up.sh local", **env)
    assert done.returncode == 1 and message in done.stderr
    assert project.calls() == []


def real_cli_project(tmp_path: Path) -> tuple[Project, dict[str, str]]:
    """A copy of the project whose ./pulumi.sh runs the real CLI from the kept cache."""
    from tests.harness.engine import cli_dir

    folder = cli_dir()
    assert folder is not None, "no Pulumi CLI of the pinned version: tools/pulumi-cli.sh build"
    project = Project(tmp_path, stand_in_on_path=False)
    return project, {"PULUMI_CLI_CACHE": str(folder.parent), "PULUMI_CLI_BUILD": "no", "PULUMI_CLI_URL": UNREACHABLE}


@pytest.mark.engine
@pytest.mark.parametrize("given", ["environment", "file of an earlier clone"])
def test_a_clone_without_a_state_folder_works_whatever_gives_the_passphrase(tmp_path, given):
    project, env = real_cli_project(tmp_path)
    if given == "environment":
        env["PULUMI_CONFIG_PASSPHRASE"] = "correct horse"
    else:  # an earlier clone at the same path left its generated passphrase
        project.generated_passphrase.parent.mkdir(parents=True)
        project.generated_passphrase.write_text("left by an earlier clone\n")
    assert not project.state.exists()
    done = project.run("./pulumi.sh stack init demo", **env)
    assert done.returncode == 0, done.stderr
    assert project.state.is_dir() and oct(project.state.stat().st_mode & 0o777) == "0o700"
    assert "demo" in project.run("./pulumi.sh stack ls", **env).stdout


@pytest.mark.engine
def test_a_stack_file_salted_under_another_passphrase_is_named_with_what_to_do(tmp_path):
    project, env = real_cli_project(tmp_path)
    made = project.run("./pulumi.sh stack init demo", **env, PULUMI_CONFIG_PASSPHRASE="the first one")
    assert made.returncode == 0, made.stderr
    assert "encryptionsalt" in (project.dir / "stacks" / "Pulumi.demo.yaml").read_text()
    done = project.run(
        "./pulumi.sh config set --secret token abc --stack demo", **env, PULUMI_CONFIG_PASSPHRASE="another one"
    )
    assert done.returncode != 0
    assert "incorrect passphrase" in done.stderr  # the CLI's own words stay
    assert "error: the passphrase in use does not open stacks/Pulumi.demo.yaml" in done.stderr
    assert "delete its encryptionsalt line" in done.stderr and "PULUMI_CONFIG_PASSPHRASE" in done.stderr


def test_down_needs_a_stack(tmp_path):
    project = Project(tmp_path)
    for command in ("./down.sh", "./down.sh --yes"):
        done = project.run(command)
        assert done.returncode == 64 and "usage: ./down.sh STACK [--yes]" in done.stderr
    assert project.calls() == []


# ---- the commands of the README and docs/, as written ----


def readme_commands() -> list[str]:
    """Lines of the bash blocks of the README and docs/**/*.md that run the project's
    up/pulumi/down scripts."""
    return [
        line.strip()
        for path in doc_files()
        for line in bash_lines(path.read_text())
        if re.match(r"\./(up|pulumi|down)\.sh\b", line)
    ]


def expected_calls(command: str) -> list[list[str]]:
    script, *args = shlex.split(command, comments=True)
    if script == "./up.sh":
        stack, *rest = args or ["local"]
        return [["stack", "select", "--create", stack], ["up", "--stack", stack, *rest]]
    if script == "./down.sh":
        stack, *rest = args
        return [["destroy", "--stack", stack, *rest]]
    return [args]


def test_the_readme_shows_up_outputs_and_teardown():
    commands = [shlex.split(c, comments=True) for c in readme_commands()]
    assert ["./up.sh", "local"] in commands
    assert any(c[:3] == ["./pulumi.sh", "stack", "output"] for c in commands)
    assert ["./down.sh", "local"] in commands and ["./down.sh", "local", "--yes"] in commands
    assert ["./up.sh", "nogpu"] in commands and ["./down.sh", "nogpu"] in commands  # docs/no-gpu.md
    for command in commands:
        if command[0] in ("./up.sh", "./down.sh") and len(command) > 1:
            assert (ROOT / "stacks" / f"Pulumi.{command[1]}.yaml").exists(), command


@pytest.mark.parametrize("command", readme_commands())
def test_readme_command_runs_pulumi_as_written(tmp_path, command):
    project = Project(tmp_path)
    done = project.run(command)
    assert done.returncode == 0, done.stderr
    calls = project.calls()
    assert [call["argv"] for call in calls] == expected_calls(command)
    for call in calls:
        assert call["executable"] == str(project.bin / "pulumi")
        assert_wrapped(call, project)
    if command.startswith("./down.sh"):
        stack = shlex.split(command)[1]
        assert f"destroying stack {stack}: its containers, bridges, NAT rules" in done.stderr


def test_readme_commands_share_one_state_and_passphrase(tmp_path):
    """up, then outputs, then teardown, in one project: the same backend and passphrase file."""
    project = Project(tmp_path)
    for command in readme_commands():
        assert project.run(command).returncode == 0, command
    calls = project.calls()
    assert len({(call["backend"], call["passphrase_file"]) for call in calls}) == 1
    assert len(calls) >= len(readme_commands())


def test_wrappers_are_executable():
    for name in ("up.sh", "pulumi.sh", "down.sh", "tools/pulumi-cli.sh"):
        assert os.access(ROOT / name, os.X_OK), name


# ---- which stack without one, and a mistyped one ----


@pytest.mark.parametrize(("driver", "stack"), [(False, "nogpu"), (True, "local")])
def test_up_without_a_stack_picks_the_one_this_machine_can_run(tmp_path, driver, stack):
    project = Project(tmp_path)
    proc = tmp_path / "proc-driver-nvidia"
    if driver:
        proc.mkdir()
    done = project.run("./up.sh", NVIDIA_DRIVER_PROC=str(proc))
    assert done.returncode == 0, done.stderr
    first = done.stderr.splitlines()[0]
    if driver:
        assert first == "the NVIDIA driver is loaded: bringing up the GPU stack local (./up.sh local)"
    else:
        assert first.startswith(f"no NVIDIA driver here ({proc} is missing): bringing up the GPU-less stack nogpu")
    expected = [["stack", "select", "--create", stack], ["up", "--stack", stack]]
    assert [call["argv"] for call in project.calls()] == expected


def test_up_refuses_a_stack_without_a_file_before_anything(tmp_path):
    project = Project(tmp_path)
    done = project.run("./up.sh locl")
    assert done.returncode == 2
    assert done.stderr.startswith("error: no stack locl: stacks/Pulumi.locl.yaml does not exist. Stacks: e2e ")
    assert "review.stacks new-site NAME" in done.stderr
    assert project.calls() == [] and not (project.dir / "stacks" / "Pulumi.locl.yaml").exists()


# ---- the venv (tools/setup.sh, shared by up.sh, test.sh and verify.sh) ----

# What tools/setup.sh asks a python: its base installation and version.
IDENTITY = "import sys; print(sys.base_prefix, sys.version.split()[0])"
# A python3 (the distribution's, $DISTRO_PYTHON3) whose `-m venv` makes a venv with a working
# python and pip (recorded) that runs it, and that has ensurepip only when $HAS_ENSUREPIP is set
# (Debian without python3-venv has not).
FAKE_PYTHON3 = """#!/bin/bash
# venv_python's version check (a 3.11): not recorded, the calls the tests compare are ensure_venv's.
[ "$*" != "-c import sys; sys.exit(sys.version_info < (3, 11))" ] || exit 0
echo "python3 $*" >> "$RECORD"
case "$*" in
  "-c import ensurepip") [ -n "${HAS_ENSUREPIP:-}" ] ;;
  "-c import sys; print(sys.base_prefix, sys.version.split()[0])") echo "/usr 3.11.2" ;;
  "-m venv venv")
    mkdir -p venv/bin
    printf '#!/bin/bash\\necho "venv/bin/python $*" >> "$RECORD"\\n' > venv/bin/python
    printf '[[ $* != *sys.base_prefix* ]] || echo "/usr 3.11.2"\\n' >> venv/bin/python
    chmod +x venv/bin/python ;;
  *) exit 1 ;;
esac
"""
FAKE_RECORDER = '#!/bin/bash\necho "$(basename "$0") $*" >> "$RECORD"\n'


def made_venv(project: Path, made_by: str = "/usr 3.11.2") -> None:
    """A venv/ with a working python and pip, made by the Python `made_by` names."""
    (project / "venv" / "bin").mkdir(parents=True)
    python = project / "venv" / "bin" / "python"
    python.write_text(f'#!/bin/bash\necho "venv/bin/python $*" >> "$RECORD"\necho "{made_by}"\n')
    python.chmod(0o755)


def venv_project(tmp_path: Path, *, root: bool) -> tuple[Path, dict]:
    project = tmp_path / "project"
    (project / "tools").mkdir(parents=True)
    shutil.copy2(ROOT / "tools" / "setup.sh", project / "tools")
    (project / "requirements.txt").write_text("pulumi\n")
    (project / "requirements.lock").write_text("pulumi==1.0 --hash=sha256:" + "a" * 64 + "\n")
    (project / "requirements-test.lock").write_text("pytest==1.0 --hash=sha256:" + "b" * 64 + "\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (
        ("python3", FAKE_PYTHON3),
        ("apt-get", FAKE_RECORDER),
        ("id", f"#!/bin/bash\necho {0 if root else 1000}\n"),
    ):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "RECORD": str(tmp_path / "record"), "LC_ALL": "C"}
    return project, env | {"DISTRO_PYTHON3": str(bin_dir / "python3")}


def ensure_venv(project: Path, env: dict, *args: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    done = subprocess.run(
        ["bash", "-c", f"set -euo pipefail; source tools/setup.sh; ensure_venv {shlex.join(args)}"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
    )
    record = Path(env["RECORD"])
    lines = record.read_text().splitlines() if record.exists() else []
    record.unlink(missing_ok=True)
    return done, lines


# The locks only, every file checked against its sha256 and no dependency unlocked (P9).
PIP_INSTALL = (
    "venv/bin/python -m pip install -q --disable-pip-version-check --require-hashes --no-deps -r requirements.lock"
)


@pytest.mark.parametrize("broken", ["no python", "no pip"])
def test_a_broken_venv_is_rebuilt(tmp_path, broken):
    project, env = venv_project(tmp_path, root=True)
    (project / "venv" / "bin").mkdir(parents=True)
    if broken == "no pip":  # what `python3 -m venv` leaves when ensurepip is missing
        (project / "venv" / "bin" / "python").write_text("#!/bin/bash\necho 'No module named pip' >&2; exit 1\n")
        (project / "venv" / "bin" / "python").chmod(0o755)
    done, calls = ensure_venv(project, {**env, "HAS_ENSUREPIP": "1"})
    assert done.returncode == 0, done.stderr
    assert "venv/ is broken (no working python or pip in it): rebuilding it" in done.stderr
    assert calls == ["python3 -c import ensurepip", "python3 -m venv venv", PIP_INSTALL]


def test_a_working_venv_is_kept(tmp_path):
    project, env = venv_project(tmp_path, root=True)
    made_venv(project)
    done, calls = ensure_venv(project, env)
    assert done.returncode == 0 and done.stderr == ""
    assert calls == [f"venv/bin/python -c import pip; {IDENTITY}", f"python3 -c {IDENTITY}", PIP_INSTALL]


def test_a_venv_made_by_another_python_is_rebuilt_with_the_distributions(tmp_path):
    """A venv made by a python3 earlier on PATH (pyenv's, /usr/local/bin's) is made again by the
    distribution's, the one ./up.sh runs for a user and CI tests."""
    project, env = venv_project(tmp_path, root=True)
    made_venv(project, made_by="/root/.pyenv/versions/3.11.7 3.11.7")
    done, calls = ensure_venv(project, {**env, "HAS_ENSUREPIP": "1"})
    assert done.returncode == 0, done.stderr
    python = env["DISTRO_PYTHON3"]
    assert done.stderr == (
        f"venv/ was made by another Python (/root/.pyenv/versions/3.11.7 3.11.7) than {python} (/usr 3.11.2):"
        " rebuilding it\n"
    )
    assert calls == [
        f"venv/bin/python -c import pip; {IDENTITY}",
        f"python3 -c {IDENTITY}",
        "python3 -c import ensurepip",
        "python3 -m venv venv",
        PIP_INSTALL,
    ]
    # The new venv runs the distribution's Python: the next run keeps it.
    done, calls = ensure_venv(project, env)
    assert done.returncode == 0 and done.stderr == "" and "python3 -m venv venv" not in calls


def test_the_venv_python_is_the_distributions_before_one_earlier_on_path(tmp_path):
    project, env = venv_project(tmp_path, root=True)
    distro = tmp_path / "usr-bin" / "python3"
    distro.parent.mkdir()
    shutil.copy2(tmp_path / "bin" / "python3", distro)

    def venv_python(distro_python3: Path) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", "-c", "source tools/setup.sh; venv_python"],
            cwd=project,
            env={**env, "DISTRO_PYTHON3": str(distro_python3)},
            capture_output=True,
            text=True,
        )

    assert venv_python(distro).stdout == f"{distro}\n"  # though PATH finds tmp/bin/python3 first
    assert venv_python(tmp_path / "none").stdout == f"{tmp_path / 'bin' / 'python3'}\n"
    # A distribution's python3 older than the project supports (Ubuntu 22.04's 3.10) is passed over.
    old = tmp_path / "old-python3"
    old.write_text("#!/bin/sh\n# stands in for a Python 3.10: the version check fails\nexit 1\n")
    old.chmod(0o755)
    assert venv_python(old).stdout == f"{tmp_path / 'bin' / 'python3'}\n"
    # Unset, it is Debian's own.
    done = subprocess.run(
        ["bash", "-c", "source tools/setup.sh; venv_python"],
        cwd=project,
        env={k: v for k, v in env.items() if k != "DISTRO_PYTHON3"},
        capture_output=True,
        text=True,
    )
    assert done.stdout == (
        "/usr/bin/python3\n" if Path("/usr/bin/python3").exists() else f"{tmp_path / 'bin' / 'python3'}\n"
    )


def test_without_python3_venv_root_installs_it_first(tmp_path):
    project, env = venv_project(tmp_path, root=True)
    done, calls = ensure_venv(project, env)
    assert done.returncode == 0, done.stderr
    assert "installing Debian's python3-venv" in done.stderr
    assert calls[:4] == [
        "python3 -c import ensurepip",
        "apt-get update -qq",
        "apt-get install -y -qq python3-venv",
        "python3 -m venv venv",
    ]


def test_without_python3_venv_a_user_is_told_the_command(tmp_path):
    project, env = venv_project(tmp_path, root=False)
    done, calls = ensure_venv(project, env)
    assert done.returncode == 1
    assert done.stderr == (
        "error: python3 cannot make a venv here: Debian's python3-venv is missing. Run as root:\n"
        "  apt-get install -y python3-venv\n"
    )
    assert calls == ["python3 -c import ensurepip"] and not (project / "venv").exists()


def test_up_test_and_verify_share_the_venv_setup():
    for script in ("up.sh", "test.sh", "verify.sh"):
        text = (ROOT / script).read_text()
        assert "source tools/setup.sh" in text and "ensure_venv" in text, script
        assert "python3 -m venv" not in text, script


def test_the_test_tools_are_installed_only_for_the_tests(tmp_path):
    """up.sh and verify.sh (as root, with the passphrase) install the program's lock only; the
    test tools' lock comes beside it for ./test.sh and CI."""
    project, env = venv_project(tmp_path, root=True)
    made_venv(project)
    done, calls = ensure_venv(project, env, "test")
    assert done.returncode == 0, done.stderr
    assert calls[-1] == f"{PIP_INSTALL} -r requirements-test.lock" and "python3 -m venv venv" not in calls
    for script in ("up.sh", "verify.sh"):
        assert re.findall(r"^ensure_venv.*$", (ROOT / script).read_text(), re.M) == ["ensure_venv"], script
    assert re.findall(r"^ensure_venv.*$", (ROOT / "test.sh").read_text(), re.M) == ["ensure_venv test"]
    assert "ensure_venv test" in (ROOT / ".ci" / "run").read_text()
    runtime = (ROOT / "requirements.txt").read_text().lower()
    for tool in ("pytest", "ruff", "hypothesis", "moto", "kubernetes-validate", "check-jsonschema"):
        assert not re.search(rf"^{tool}\b", runtime, re.M), f"{tool} is a test tool: requirements-test.txt"
        assert re.search(rf"^{tool}\b", (ROOT / "requirements-test.txt").read_text().lower(), re.M), tool


def test_pip_runs_again_only_when_a_lock_changed(tmp_path):
    """A no-change ./up.sh spends no pip run: the sha256 of the locks pip last installed in full
    are kept in venv/, and pip runs again when a wanted lock is not among them."""
    project, env = venv_project(tmp_path, root=True)
    made_venv(project)
    assert ensure_venv(project, env)[1][-1] == PIP_INSTALL
    done, calls = ensure_venv(project, env)
    assert done.returncode == 0 and not [call for call in calls if " -m pip " in call]
    # The test tools' lock was never installed into this venv: pip runs, then neither form does.
    assert ensure_venv(project, env, "test")[1][-1] == f"{PIP_INSTALL} -r requirements-test.lock"
    for args in (("test",), ()):
        assert not [call for call in ensure_venv(project, env, *args)[1] if " -m pip " in call], args
    (project / "requirements.lock").write_text("pulumi==2.0 --hash=sha256:" + "c" * 64 + "\n")
    assert ensure_venv(project, env)[1][-1] == PIP_INSTALL


def test_a_failed_pip_run_is_tried_again_next_time(tmp_path):
    project, env = venv_project(tmp_path, root=True)
    made_venv(project)
    python = project / "venv" / "bin" / "python"
    python.write_text(python.read_text() + '[[ $* != *"pip install"* ]] || exit 1\n')
    done, calls = ensure_venv(project, env)
    assert done.returncode == 1 and calls[-1] == PIP_INSTALL
    assert not (project / "venv" / ".installed-locks").exists()
    assert ensure_venv(project, env)[1][-1] == PIP_INSTALL


# ---- steps at once: the cluster's, said, and overridable (tools/parallelism.py) ----


def up_call(project: Project, command: str, **env: str) -> tuple[dict, str]:
    """The `pulumi up|preview|destroy|refresh` call of a wrapper command, and its stderr."""
    done = project.run(command, **env)
    assert done.returncode == 0, done.stderr
    [call] = [c for c in project.calls() if c["argv"][0] in ("up", "preview", "destroy", "refresh")]
    return call, done.stderr


def test_up_runs_as_many_steps_at_once_as_the_cluster_has_nodes_plus_16(tmp_path):
    project = Project(tmp_path)
    done = project.run("./up.sh nogpu")
    assert done.returncode == 0, done.stderr
    select, up = project.calls()
    assert select["argv"][:2] == ["stack", "select"] and select["parallel"] is None  # takes no --parallel
    assert up["argv"] == ["up", "--stack", "nogpu"] and up["parallel"] == "20"  # 4 nodes + 16
    assert (
        "pulumi up: 20 steps at once (4 nodes + 16: every node's steps can run together; "
        "PULUMI_PARALLEL or --parallel N to change)\n"
    ) in done.stderr


@pytest.mark.parametrize(
    ("command", "said"),
    [
        ("./pulumi.sh preview --stack e2e", "pulumi preview: 20 steps at once (4 nodes + 16"),
        ("./down.sh nogpu --yes", "pulumi destroy: 20 steps at once (4 nodes + 16"),
        ("./pulumi.sh refresh --stack=local --yes", "pulumi refresh: 20 steps at once (4 nodes + 16"),
        ("./pulumi.sh up --stack k8s", "pulumi up: 16 steps at once (no cluster nodes;"),
    ],
)
def test_every_command_taking_parallel_gets_the_cluster_s(tmp_path, command, said):
    call, stderr = up_call(Project(tmp_path), command)
    assert call["parallel"] == re.search(r": (\d+) steps", said).group(1) and said in stderr


@pytest.mark.parametrize(
    ("command", "env", "argv_tail", "said"),
    [
        ("./up.sh nogpu --parallel 3", {}, ["--parallel", "3"], "pulumi up: --parallel 3 steps at once (given)"),
        ("./up.sh nogpu -p3", {}, ["-p3"], "pulumi up: --parallel 3 steps at once (given)"),
        ("./up.sh nogpu -yp 3", {}, ["-yp", "3"], "pulumi up: --parallel 3 steps at once (given)"),
        ("./up.sh nogpu --parallel=3", {}, ["--parallel=3"], "pulumi up: --parallel 3 steps at once (given)"),
        ("./up.sh nogpu", {"PULUMI_PARALLEL": "5"}, [], "pulumi up: 5 steps at once (PULUMI_PARALLEL)"),
    ],
)
def test_an_explicit_parallel_or_pulumi_parallel_wins(tmp_path, command, env, argv_tail, said):
    """The CLI's own order: --parallel, then PULUMI_PARALLEL; the wrapper then sets nothing."""
    call, stderr = up_call(Project(tmp_path), command, **env)
    assert call["argv"] == ["up", "--stack", "nogpu", *argv_tail]
    assert call["parallel"] == env.get("PULUMI_PARALLEL") and f"{said}\n" in stderr


def test_without_a_stack_file_the_cli_s_default_stays_and_is_said(tmp_path):
    # No --stack: the stack selected (the stand-in CLI names none), so no file to size it by.
    call, stderr = up_call(Project(tmp_path), "./pulumi.sh up")
    assert call["parallel"] is None
    assert "pulumi up: the CLI's default steps at once (4 x the cores): no stack file to size it by" in stderr


def test_commands_without_parallel_get_nothing(tmp_path):
    project = Project(tmp_path)
    done = project.run("./pulumi.sh stack output --stack nogpu")
    assert done.returncode == 0 and "steps at once" not in done.stderr
    [call] = project.calls()
    assert call["parallel"] is None
