"""Reaching a stack's hosts from the machine that runs `pulumi up`: this machine itself, or an
SSH host through the connection the stack uses (its address, port, user, pinned host key and
the private key kept as a stack secret). Each host answers a probe and the drift check
(components/host/files/verify_host.sh against the host state rendered from the config)."""

import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

from components.common.transport import script
from components.composition.cluster_host import ClusterHostConfig
from components.composition.config import ClusterConfig
from components.composition.host_state import render_host_state
from components.host.boot_unit import FILES
from components.host.config import SshEndpoint

CONNECT_TIMEOUT_S = 5
DRIFT_KINDS = ("MISSING", "FOREIGN", "WRONG", "SHADOWED")


class Shell:
    """Runs a command on one host; `where` names the host in messages."""

    where = "this machine"

    def run(self, argv: list[str], stdin: str = "", env: dict | None = None, timeout: int = 60):
        raise NotImplementedError


class LocalShell(Shell):
    def run(self, argv, stdin="", env=None, timeout=60):
        import os

        return subprocess.run(
            argv,
            input=stdin,
            env={**os.environ, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def _endpoint_options(endpoint: SshEndpoint, key: Path, known_hosts: Path) -> list[str]:
    options = ["-F", "/dev/null", "-i", str(key), "-p", str(endpoint.port), "-l", endpoint.user]
    for option in (
        "BatchMode=yes",
        "IdentitiesOnly=yes",
        f"UserKnownHostsFile={known_hosts}",
        "GlobalKnownHostsFile=/dev/null",
        "StrictHostKeyChecking=yes",
        f"ConnectTimeout={CONNECT_TIMEOUT_S}",
        "LogLevel=ERROR",
    ):
        options += ["-o", option]
    return options


def _known_host(endpoint: SshEndpoint) -> str:
    name = endpoint.address if endpoint.port == 22 else f"[{endpoint.address}]:{endpoint.port}"
    return f"{name} {endpoint.host_key}\n"


class SshShell(Shell):
    """OpenSSH with the stack's connection: the host key pinned (a host presenting another key
    is refused), the private key in a file of this process only, a bastion by ProxyCommand."""

    def __init__(self, connection, private_key: str, workdir: Path):
        self.where = f"{connection.user}@{connection.address}:{connection.port}"
        key = workdir / "id"
        key.touch(mode=0o600)
        key.write_text(private_key if private_key.endswith("\n") else private_key + "\n")
        known = workdir / "known_hosts"
        known.write_text(_known_host(connection) + (_known_host(connection.bastion) if connection.bastion else ""))
        self.argv = ["ssh", *_endpoint_options(connection, key, known)]
        if connection.bastion:
            jump = shlex.join(["ssh", *_endpoint_options(connection.bastion, key, known), "-W", "%h:%p"])
            self.argv += ["-o", f"ProxyCommand={jump} {connection.bastion.address}"]
        self.argv.append(connection.address)

    def run(self, argv, stdin="", env=None, timeout=60):
        assignments = [f"{name}={shlex.quote(value)}" for name, value in (env or {}).items()]
        command = " ".join([*assignments, shlex.join(argv)])
        return subprocess.run(
            [*self.argv, command], input=stdin, capture_output=True, text=True, timeout=timeout, check=False
        )


@dataclass
class HostReport:
    name: str
    connection: str
    reachable: bool
    message: str = ""
    drift_checked: bool = False
    drift: list[str] | None = None

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "connection": self.connection,
            "reachable": self.reachable,
            "message": self.message,
            "drift_checked": self.drift_checked,
            "drift": self.drift or [],
        }


def describe(host: ClusterHostConfig) -> str:
    connection = host.connection
    if connection.kind == "local":
        return "local"
    if connection.kind == "ssh":
        return f"ssh {connection.user}@{connection.address}:{connection.port}"
    return f"ec2 {connection.instance_type}"


def open_shell(host: ClusterHostConfig, secret, workdir: Path) -> tuple[Shell | None, str]:
    """A shell on the host, or None and why not. `secret(name)` reads a stack secret."""
    connection = host.connection
    if connection.kind == "local":
        return LocalShell(), ""
    if connection.kind == "ec2":
        return None, (
            "not reached: an EC2 host's SSH host key is generated in the stack's state; run ./verify.sh on the instance"
        )
    try:
        private_key = secret(connection.private_key_secret)
    except LookupError as error:
        return None, f"not reached: {error}"
    folder = workdir / host.name
    folder.mkdir(mode=0o700)
    return SshShell(connection, private_key, folder), ""


def probe(shell: Shell) -> str:
    """'' when the host answers; otherwise what went wrong, in one line."""
    try:
        done = shell.run(["true"], timeout=CONNECT_TIMEOUT_S + 10)
    except subprocess.TimeoutExpired:
        return f"{shell.where} does not answer (no reply in {CONNECT_TIMEOUT_S + 10} s)"
    if done.returncode == 0:
        return ""
    why = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
    return f"{shell.where} does not answer: {why}"


def drift(shell: Shell, cluster: ClusterConfig, host: ClusterHostConfig) -> tuple[list[str] | None, str]:
    """The drift lines verify_host.sh prints for the host (None and why when it cannot run)."""
    state = render_host_state(cluster, host if cluster.multi_host else None)
    # The script goes by stdin and the expected state by the environment into a private folder
    # on the host; the script's own commands read no stdin of ours.
    remote = (
        'dir=$(mktemp -d) && cat > "$dir/verify_host.sh" && printf %s "$STATE" > "$dir/state.env" && '
        '/bin/bash "$dir/verify_host.sh" "$dir/state.env" < /dev/null; rc=$?; rm -rf "$dir"; exit $rc'
    )
    try:
        done = shell.run(
            ["/bin/bash", "-c", remote], stdin=script(FILES / "verify_host.sh"), env={"STATE": state}, timeout=120
        )
    except subprocess.TimeoutExpired:
        return None, "the drift check took more than 120 s"
    if done.returncode not in (0, 1):
        why = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return None, f"the drift check failed: {why}"
    return [line for line in done.stdout.splitlines() if line.startswith(DRIFT_KINDS)], ""
