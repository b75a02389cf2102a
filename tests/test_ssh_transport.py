"""The SSH transport against a real sshd that the test starts with its own config file, port,
host key and drop-in directory (the machine's own sshd and /etc/ssh are never touched).

The harness (tests/harness/command_executor.py, through ssh_executor.py) sends a command's
environment as SSH env requests and pins the host key, as pulumi-command does: so without
the sshd drop-in a parameterized command fails exactly as it would for a user, and a host
presenting another key is refused before anything runs. Needs root and openssh-server.
"""

import base64
import json
import os
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from components.composition.stack_config import parse_stack_config
from tests.harness import ssh_hosts
from tests.harness.command_executor import (
    CommandFailedError,
    StateEntry,
    host_commands,
    makes_the_munge_key,
    run_script,
)
from tests.harness.e2e_teardown import SECRET, SSH_HOST, STACK, one_ssh_host_config, remove_stand_in_gpus
from tests.harness.program_harness import run_program

pytestmark = pytest.mark.e2e


def test_ssh_commands_need_the_drop_in_the_pinned_key_and_get_secrets_by_stdin():
    assert os.geteuid() == 0, "needs root (starts an sshd, writes host state)"
    assert shutil.which("ssh") and shutil.which("ssh-keygen"), "openssh-client missing: run `bash .ci/run`"
    system_dropin = Path("/etc/ssh/sshd_config.d/gpucluster-e2e.conf")
    system_before = system_dropin.exists()
    state_before = Path("/var/lib/gpucluster").exists()
    dropin = SSH_HOST.directory / "sshd" / "sshd_config.d" / "gpucluster-e2e.conf"
    try:
        server = ssh_hosts.start(SSH_HOST)
        config = one_ssh_host_config(server["host_key"])
        run = run_program(config, stack=STACK, secrets={SECRET: server["client_key"]})
        commands = {c.name: c for c in host_commands(run)}
        preflight, munge_key = commands["e2e-h1-host-preflight"], commands["e2e-h1-munge-key"]
        stand_ins = commands["e2e-h1-host-stand-in-gpus"]
        ready, accept_env = commands["e2e-h1-ssh-ready"], commands["e2e-h1-sshd-accept-env"]
        assert all(c.connection or makes_the_munge_key(c) for c in commands.values()), (
            "a command of the SSH host runs locally"
        )

        # Stock sshd: the parameters are dropped, the script stops naming the first one.
        with pytest.raises(CommandFailedError, match="environment variable CLUSTER is not set"):
            run_script(preflight, preflight.create)

        # Another host key than the pinned one: refused before any script runs.
        other = replace(preflight, connection={**preflight.connection, "hostKey": key_of_another_host()})
        with pytest.raises(CommandFailedError, match="Host key verification failed"):
            run_script(other, other.create)

        # The bootstrap: wait for SSH, then the drop-in, checked and reloaded (same sshd pid).
        run_script(ready, ready.create)
        run_script(accept_env, accept_env.create)
        assert "AcceptEnv GPUCLUSTER_* PULUMI_COMMAND_*" in dropin.read_text()
        pid_file = SSH_HOST.directory / "sshd" / "sshd.pid"
        assert pid_file.read_text().strip() == server["pid"], "sshd was restarted, not reloaded"
        written = dropin.stat().st_mtime_ns
        run_script(accept_env, accept_env.create)
        assert dropin.stat().st_mtime_ns == written, "a second create rewrote the drop-in"

        # Now the parameters arrive: the stand-in GPUs are made, the preflight reports them.
        run_script(stand_ins, stand_ins.create)
        stdout, _ = run_script(preflight, preflight.create)
        facts = json.loads(stdout.splitlines()[-1])
        assert facts["devices"] == parse_stack_config(config).cluster.cluster_hosts[0].gpu.devices

        # The provider's PULUMI_COMMAND_STDOUT of an update arrives too (AcceptEnv PULUMI_COMMAND_*).
        echo = replace(preflight, create="printenv PULUMI_COMMAND_STDOUT")
        seen, _ = run_script(echo, echo.create, StateEntry(echo, stdout="previous output"))
        assert seen == "previous output"

        # The munge key travels by stdin only: the file holds it, no environment does.
        key_file = Path(munge_key.environment["GPUCLUSTER_MUNGE_KEY_FILE"])
        assert munge_key.stdin and munge_key.stdin not in json.dumps(munge_key.environment)
        run_script(munge_key, munge_key.create)
        assert key_file.read_bytes() == base64.b64decode(munge_key.stdin)
        assert oct(key_file.stat().st_mode & 0o777) == "0o400"
        run_script(munge_key, munge_key.create)  # converges: same key, nothing to do
        run_script(munge_key, munge_key.delete)
        assert not key_file.exists()
        run_script(stand_ins, stand_ins.delete)

        # Destroy removes the drop-in (parameters are dropped again), and succeeds when gone.
        run_script(accept_env, accept_env.delete)
        assert not dropin.exists()
        run_script(accept_env, accept_env.delete)
        with pytest.raises(CommandFailedError, match="environment variable CLUSTER is not set"):
            run_script(preflight, preflight.create)
    finally:
        ssh_hosts.remove(SSH_HOST)
        remove_stand_in_gpus()
        shutil.rmtree("/var/lib/gpucluster/e2e", ignore_errors=True)
        if not state_before and Path("/var/lib/gpucluster").exists() and not any(Path("/var/lib/gpucluster").iterdir()):
            Path("/var/lib/gpucluster").rmdir()
    assert system_dropin.exists() == system_before, "the machine's own sshd config was touched"


def key_of_another_host() -> str:
    key = SSH_HOST.directory / "other_host_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "", "-f", str(key)], check=True)
    return " ".join(Path(f"{key}.pub").read_text().split()[:2])
