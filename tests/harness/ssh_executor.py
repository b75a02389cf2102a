"""Run recorded `remote.Command`s over real SSH, as pulumi-command does.

Test code. What matters for a test to fail where `pulumi up` would:
- the environment travels as SSH env requests (OpenSSH's `SendEnv`), so an sshd without a
  matching `AcceptEnv` drops it silently, as it drops pulumi-command's;
- the server's host key must equal the pinned `host_key` (a known_hosts file holding only
  it, `StrictHostKeyChecking yes`), as pulumi-command checks it when `host_key` is set;
- the command string goes to the server as is (sshd runs it with the login shell), and
  `stdin`, when set, is the command's standard input.
"""

import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tests.harness.program_harness import ProgramRun

REMOTE_TYPE = "command:remote:Command"
LOCAL_TYPE = "command:local:Command"
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
class RemoteCommand:
    name: str
    urn: str
    create: str
    delete: str | None
    environment: dict
    connection: dict
    stdin: str | None
    dependencies: frozenset[str]


def remote_commands(run: ProgramRun) -> list[RemoteCommand]:
    """The remote Commands of a run, each with its dependencies on other commands."""
    by_urn = run.by_urn
    commands = []
    for resource in run.of_type(REMOTE_TYPE):
        inputs = resource.inputs
        commands.append(
            RemoteCommand(
                name=resource.name,
                urn=resource.urn,
                create=inputs["create"],
                delete=inputs.get("delete"),
                environment=dict(unwrap(inputs.get("environment") or {})),
                connection=unwrap(inputs["connection"]),
                stdin=unwrap(inputs.get("stdin")),
                dependencies=frozenset(
                    urn for urn in resource.dependencies if by_urn[urn].type in (REMOTE_TYPE, LOCAL_TYPE)
                ),
            )
        )
    return commands


class RemoteCommandFailedError(AssertionError):
    pass


def ssh_argv(connection: dict, workdir: Path) -> list[str]:
    """An OpenSSH client command line for a pulumi-command connection (key and pinned host key
    written to files under `workdir`)."""
    key = workdir / "id"
    key.write_text(connection["privateKey"])
    key.chmod(0o600)
    host, port = connection["host"], int(connection.get("port", 22))
    known = workdir / "known_hosts"
    if connection.get("hostKey"):
        known.write_text(f"[{host}]:{port} {connection['hostKey']}\n")
        check = ["-o", "StrictHostKeyChecking=yes"]
    else:
        # pulumi-command without host_key does not check it.
        known.write_text("")
        check = ["-o", "StrictHostKeyChecking=no"]
    return [
        "ssh",
        "-F",
        "/dev/null",
        "-i",
        str(key),
        "-p",
        str(port),
        "-o",
        "BatchMode=yes",
        "-o",
        "IdentitiesOnly=yes",
        "-o",
        f"UserKnownHostsFile={known}",
        "-o",
        "GlobalKnownHostsFile=/dev/null",
        *check,
        "-o",
        "SendEnv=*",
        "-o",
        "ConnectTimeout=15",
        "-o",
        "LogLevel=ERROR",
        "-l",
        connection.get("user", "root"),
        host,
    ]


def run_remote(command: RemoteCommand, script: str, timeout: int = 900) -> str:
    """Run one script of a command over SSH; its environment is sent as env requests only."""
    with tempfile.TemporaryDirectory(prefix="gpucluster-ssh-") as workdir:
        argv = [*ssh_argv(command.connection, Path(workdir)), script]
        # Only the command's own variables are in the client's environment (SendEnv=* sends
        # them all): nothing of this process leaks in as it would not with pulumi-command.
        environment = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **command.environment}
        done = subprocess.run(
            argv,
            env=environment,
            input=command.stdin or "",
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    if done.returncode != 0:
        raise RemoteCommandFailedError(
            f"{command.name} exited {done.returncode}\n--- stderr ---\n{done.stderr[-4000:]}"
            f"\n--- stdout ---\n{done.stdout[-2000:]}"
        )
    return done.stdout


def create(command: RemoteCommand, timeout: int = 900) -> str:
    return run_remote(command, command.create, timeout)


def delete(command: RemoteCommand, timeout: int = 600) -> str:
    return run_remote(command, command.delete, timeout) if command.delete else ""
