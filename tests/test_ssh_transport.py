"""The SSH transport against a real sshd that the test starts with its own config file, port,
host key and drop-in directory (the machine's own sshd and /etc/ssh are never touched).

The harness (tests/harness/ssh_executor.py) sends a command's environment as SSH env
requests and pins the host key, as pulumi-command does: so without the sshd drop-in a
parameterized command fails exactly as it would for a user, and a host presenting another
key is refused before anything runs. Needs root, openssh-server and openssh-client.
"""

import base64
import json
import os
import shutil
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest

from tests.harness.e2e_teardown import SSHD_DIR, STAND_IN_DIR, remove_stand_in_gpus, stop_test_sshd
from tests.harness.program_harness import run_program, stack_config
from tests.harness.ssh_executor import RemoteCommandFailedError, create, delete, remote_commands

pytestmark = pytest.mark.e2e
SECRET = "e2eSshKey"
PORT = 2222


def sh(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout


def start_test_sshd() -> dict:
    """sshd -f SSHD_DIR/sshd_config on 127.0.0.1:PORT with its own host key, authorized key
    and drop-in directory; returns its pid, host key and the client's private key."""
    stop_test_sshd()
    SSHD_DIR.mkdir(parents=True)
    (SSHD_DIR / "sshd_config.d").mkdir()
    sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "", "-f", str(SSHD_DIR / "host_key"))
    sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "", "-f", str(SSHD_DIR / "client_key"))
    shutil.copy(SSHD_DIR / "client_key.pub", SSHD_DIR / "authorized_keys")
    (SSHD_DIR / "sshd_config").write_text(
        f"Include {SSHD_DIR}/sshd_config.d/*.conf\n"
        f"Port {PORT}\nListenAddress 127.0.0.1\n"
        f"HostKey {SSHD_DIR}/host_key\nPidFile {SSHD_DIR}/sshd.pid\n"
        f"AuthorizedKeysFile {SSHD_DIR}/authorized_keys\n"
        "PermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        "UsePAM no\nStrictModes no\n"
    )
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory
    sh("/usr/sbin/sshd", "-f", str(SSHD_DIR / "sshd_config"), "-E", str(SSHD_DIR / "sshd.log"))
    deadline = time.monotonic() + 10
    while f"127.0.0.1:{PORT} " not in sh("ss", "-Hltn"):
        assert time.monotonic() < deadline, "the test sshd does not listen"
        time.sleep(0.1)
    return {
        "pid": (SSHD_DIR / "sshd.pid").read_text().strip(),
        "host_key": " ".join((SSHD_DIR / "host_key.pub").read_text().split()[:2]),
        "client_key": (SSHD_DIR / "client_key").read_text(),
    }


def ssh_stack(host_key: str) -> dict:
    """The e2e stack with its one host reached over SSH (hosts: [...])."""
    config = stack_config("e2e")
    cluster = config["cluster"]
    host = cluster.pop("host")
    cluster["hosts"] = [
        {
            "name": "h1",
            "connection": {
                "kind": "ssh",
                "address": "127.0.0.1",
                "port": PORT,
                "host_key": host_key,
                "private_key_secret": SECRET,
            },
            "shared_dir": host["shared_dir"],
            "network": cluster.pop("network"),
            "gpu": cluster.pop("gpu"),
        }
    ]
    return config


def make_stand_in_gpus(config: dict) -> None:
    STAND_IN_DIR.mkdir(parents=True, exist_ok=True)
    gpu = config["cluster"]["hosts"][0]["gpu"]
    for minor, path in enumerate(gpu["devices"]):
        sh("mknod", "-m", "0666", path, "c", "195", str(minor))


def test_ssh_commands_need_the_drop_in_the_pinned_key_and_get_secrets_by_stdin():
    assert os.geteuid() == 0, "needs root (starts an sshd, writes host state)"
    for tool in ("sshd", "ssh", "ssh-keygen"):
        assert shutil.which(tool) or Path(f"/usr/sbin/{tool}").exists(), f"{tool} missing: run `bash .ci/run`"
    system_dropin = Path("/etc/ssh/sshd_config.d/gpucluster.conf")
    system_before = system_dropin.exists()
    state_before = Path("/var/lib/gpucluster").exists()
    dropin = SSHD_DIR / "sshd_config.d" / "gpucluster.conf"
    try:
        server = start_test_sshd()
        config = ssh_stack(server["host_key"])
        make_stand_in_gpus(config)
        run = run_program(config, stack="e2e", secrets={SECRET: server["client_key"]})
        commands = {c.name: c for c in remote_commands(run)}
        preflight, munge_key = commands["e2e-h1-host-preflight"], commands["e2e-h1-munge-key"]

        # Stock sshd: the parameters are dropped, the script stops naming the first one.
        with pytest.raises(RemoteCommandFailedError, match="environment variable CLUSTER is not set"):
            create(preflight)

        # Another host key than the pinned one: refused before any script runs.
        other = replace(preflight, connection={**preflight.connection, "hostKey": config_key_of_another_host()})
        with pytest.raises(RemoteCommandFailedError, match="Host key verification failed"):
            create(other)

        # The bootstrap: wait for SSH, then the drop-in, checked and reloaded (same sshd pid).
        create(commands["e2e-h1-ssh-ready"])
        create(commands["e2e-h1-sshd-accept-env"])
        assert "AcceptEnv GPUCLUSTER_* PULUMI_COMMAND_*" in dropin.read_text()
        assert (SSHD_DIR / "sshd.pid").read_text().strip() == server["pid"], "sshd was restarted, not reloaded"
        written = dropin.stat().st_mtime_ns
        create(commands["e2e-h1-sshd-accept-env"])
        assert dropin.stat().st_mtime_ns == written, "a second create rewrote the drop-in"

        # Now the parameters arrive: the preflight runs and reports the stand-in GPUs.
        facts = json.loads(create(preflight).strip().splitlines()[-1])
        assert facts["devices"] == config["cluster"]["hosts"][0]["gpu"]["devices"]

        # The munge key travels by stdin only: the file holds it, no environment does.
        key_file = Path(munge_key.environment["GPUCLUSTER_MUNGE_KEY_FILE"])
        assert munge_key.stdin and munge_key.stdin not in json.dumps(munge_key.environment)
        create(munge_key)
        assert key_file.read_bytes() == base64.b64decode(munge_key.stdin)
        assert oct(key_file.stat().st_mode & 0o777) == "0o400"
        create(munge_key)  # converges: same key, nothing to do
        delete(munge_key)
        assert not key_file.exists()

        # Destroy removes the drop-in (parameters are dropped again), and succeeds when gone.
        delete(commands["e2e-h1-sshd-accept-env"])
        assert not dropin.exists()
        delete(commands["e2e-h1-sshd-accept-env"])
        with pytest.raises(RemoteCommandFailedError, match="environment variable CLUSTER is not set"):
            create(preflight)
    finally:
        stop_test_sshd()
        remove_stand_in_gpus()
        shutil.rmtree("/var/lib/gpucluster/e2e", ignore_errors=True)
        if not state_before and Path("/var/lib/gpucluster").exists() and not any(Path("/var/lib/gpucluster").iterdir()):
            Path("/var/lib/gpucluster").rmdir()
    assert system_dropin.exists() == system_before, "the machine's own sshd config was touched"


def config_key_of_another_host() -> str:
    key = SSHD_DIR / "other_host_key"
    sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "", "-f", str(key))
    return " ".join(Path(f"{key}.pub").read_text().split()[:2])
