"""Run one script of a recorded `remote.Command` over real SSH, as pulumi-command 1.2 does
(provider/pkg/provider/remote/commandOutputs.go, `run`; connection.go, `Dial`).

Test code, used by command_executor for every `command:remote:Command`. What matters for a
test to fail where `pulumi up` would:
- the environment travels as SSH env requests only (OpenSSH's `SendEnv`, one per name). An
  sshd without a matching `AcceptEnv` refuses them: pulumi-command fails the command at once
  ("could not set environment variable"); OpenSSH's client goes on without them, so here the
  script stops at its first missing parameter instead. Either way nothing runs with half its
  parameters. PULUMI_COMMAND_STDOUT/STDERR of the previous run are sent the same way on update
  and delete;
- the server's host key must equal the pinned `hostKey` (a known_hosts file holding only it,
  `StrictHostKeyChecking yes`); without `hostKey` the key is not checked, as in the provider;
- the command string goes to the server as is (sshd runs it with the login shell), and
  `stdin`, when not empty, is its standard input;
- a dial that fails is tried again up to `dialErrorLimit` times (-1: until the step's
  timeout), whatever the failure: the provider retries the whole SSH handshake, so a host key
  that is not the pinned one and a refused login are retried like a refused connection;
- a `proxy` is dialled first and the host reached through it (ProxyCommand `ssh -W`), its
  host key checked against its own `hostKey`; the provider retries a failed dial of the proxy
  up to the proxy's `dialErrorLimit` ("Dial proxy"), then dials the host through it.
"""

import subprocess
import tempfile
import time
from pathlib import Path

DIAL_ERRORS = (
    "Connection refused",
    "No route to host",
    "Connection timed out",
    "Network is unreachable",
    "Host key verification failed",
    "Permission denied (publickey",
)


def _options(connection: dict, workdir: Path, tag: str) -> list[str]:
    """OpenSSH client options for one endpoint of a pulumi-command connection."""
    key = workdir / f"{tag}-id"
    key.write_text(connection["privateKey"])
    key.chmod(0o600)
    host, port = connection["host"], int(connection.get("port", 22))
    known = workdir / f"{tag}-known_hosts"
    if connection.get("hostKey"):
        name = host if port == 22 else f"[{host}]:{port}"  # how OpenSSH looks a host up
        known.write_text(f"{name} {connection['hostKey']}\n")
        check = "yes"
    else:
        known.write_text("")
        check = "no"
    options = ["-F", "/dev/null", "-i", str(key), "-p", str(port), "-l", connection.get("user", "root")]
    for option in (
        "BatchMode=yes",
        "IdentitiesOnly=yes",
        f"UserKnownHostsFile={known}",
        "GlobalKnownHostsFile=/dev/null",
        f"StrictHostKeyChecking={check}",
        f"ConnectTimeout={int(connection.get('perDialTimeout', 15))}",
        "LogLevel=ERROR",
    ):
        options += ["-o", option]
    return options


def ssh_argv(connection: dict, workdir: Path, environment: dict) -> list[str]:
    """The OpenSSH client command line for a connection, sending exactly `environment`'s names."""
    argv = ["ssh", *_options(connection, workdir, "host")]
    if connection.get("proxy"):
        proxy = connection["proxy"]
        # The jump's own messages go to a log of their own: a failed dial of the jump host is
        # counted against the proxy's dialErrorLimit, as the provider does.
        log = ["-E", str(workdir / "proxy.log")]
        jump = " ".join(["ssh", *_options(proxy, workdir, "proxy"), *log, "-W", "%h:%p", proxy["host"]])
        argv += ["-o", f"ProxyCommand={jump}"]
    for name in environment:
        argv += ["-o", f"SendEnv={name}"]
    return [*argv, connection["host"]]


def run_over_ssh(
    connection: dict, script: str, environment: dict, stdin: str | None, timeout: int
) -> subprocess.CompletedProcess:
    """Run `script` on the connection's host; its environment only as SSH env requests."""
    limit = int(connection.get("dialErrorLimit", 10))
    proxy_limit = int((connection.get("proxy") or {}).get("dialErrorLimit", 10))
    deadline = time.monotonic() + timeout
    failed_dials = failed_proxy_dials = 0
    with tempfile.TemporaryDirectory(prefix="gpucluster-ssh-") as workdir:
        argv = [*ssh_argv(connection, Path(workdir), environment), script]
        proxy_log = Path(workdir) / "proxy.log"
        while True:
            proxy_log.unlink(missing_ok=True)
            # Nothing of this process reaches the server: SendEnv names only these variables.
            done = subprocess.run(
                argv,
                env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", **environment},
                input=stdin or "",
                capture_output=True,
                text=True,
                timeout=max(1, deadline - time.monotonic()),
                check=False,
            )
            jump = proxy_log.read_text() if proxy_log.exists() else ""
            if done.returncode == 255 and any(error in jump for error in DIAL_ERRORS):
                failed_proxy_dials += 1
                done.stderr = f"proxy: {jump}{done.stderr}"
                if (proxy_limit >= 0 and failed_proxy_dials >= proxy_limit) or time.monotonic() > deadline - 2:
                    return done
                time.sleep(1)
                continue
            dial_failed = done.returncode == 255 and any(error in done.stderr for error in DIAL_ERRORS)
            if not dial_failed:
                return done
            failed_dials += 1
            if (limit >= 0 and failed_dials >= limit) or time.monotonic() > deadline - 2:
                return done
            time.sleep(1)
