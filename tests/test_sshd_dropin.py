"""The sshd drop-in step (components/files/sshd_accept_env_*.sh) against a private sshd this
test starts on a loopback port with its own config (the machine's sshd and /etc/ssh are never
touched). The step's search for the sshd above its session is replaced by this sshd's pid:
everything else runs as over SSH. Needs root and openssh-server."""

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from components.common.transport import FILES, helpers

SSHD = "/usr/sbin/sshd"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def sshd(tmp_path):
    """A private sshd: config in tmp_path, its drop-in directory included by absolute path."""
    assert os.geteuid() == 0 and Path(SSHD).exists(), "needs root and openssh-server (run `bash .ci/run`)"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "host_key")], check=True)
    (tmp_path / "sshd_config.d").mkdir()
    config = tmp_path / "sshd_config"
    port = free_port()
    config.write_text(
        f"Include {tmp_path}/sshd_config.d/*.conf\nPort {port}\nListenAddress 127.0.0.1\n"
        f"HostKey {tmp_path}/host_key\nPidFile {tmp_path}/sshd.pid\nUsePAM no\nAcceptEnv LANG LC_*\n"
    )
    Path("/run/sshd").mkdir(exist_ok=True)
    subprocess.run([SSHD, "-f", str(config), "-E", str(tmp_path / "sshd.log")], check=True)
    deadline = time.monotonic() + 10
    while f"127.0.0.1:{port} " not in subprocess.run(["ss", "-Hltn"], capture_output=True, text=True).stdout:
        assert time.monotonic() < deadline, "the test sshd does not listen"
        time.sleep(0.1)
    pid = int((tmp_path / "sshd.pid").read_text())
    yield {"pid": pid, "config": config, "dropin": tmp_path / "sshd_config.d" / "gpucluster-t.conf"}
    os.kill(pid, signal.SIGTERM)


def step(name: str, sshd: dict, overrides: str = "") -> subprocess.CompletedProcess:
    """Run a drop-in script as it runs over SSH, for the test's sshd (cluster name 't' on stdin);
    `overrides`: shell functions standing in for commands."""
    prelude = (FILES / "ssh_prelude.sh").read_text()
    found = f"sshd_master() {{ echo {sshd['pid']}; }}\nsshd_config_of() {{ echo {sshd['config']}; }}\n{overrides}\n"
    text = f"{prelude}\n{helpers()}\n{found}\n{(FILES / name).read_text()}"
    return subprocess.run(["/bin/bash", "-c", text], input="t\n", capture_output=True, text=True, check=False)


def accepted(sshd: dict, user: str) -> set[str]:
    """The env names sshd accepts from `user` (its config as a connection of that user sees it)."""
    spec = f"user={user},host=client,addr=127.0.0.1"
    shown = subprocess.run([SSHD, "-T", "-f", str(sshd["config"]), "-C", spec], capture_output=True, text=True)
    return {line.split()[1] for line in shown.stdout.splitlines() if line.startswith("acceptenv ")}


def test_the_drop_in_accepts_the_parameters_from_the_deploying_login_only(sshd):
    done = step("sshd_accept_env_create.sh", sshd)
    assert done.returncode == 0, done.stderr
    assert "Match User root" in sshd["dropin"].read_text()
    # The deploying login gets ours beside the host's own names; other logins only the host's.
    assert accepted(sshd, "root") == {"GPUCLUSTER_*", "PULUMI_COMMAND_*", "LANG", "LC_*"}
    assert accepted(sshd, "nobody") == {"LANG", "LC_*"}
    assert Path(f"/proc/{sshd['pid']}").exists(), "sshd was restarted, not reloaded"
    written = sshd["dropin"].read_text()
    assert step("sshd_accept_env_create.sh", sshd).returncode == 0
    assert sshd["dropin"].read_text() == written
    assert step("sshd_accept_env_delete.sh", sshd).returncode == 0
    assert not sshd["dropin"].exists()
    assert accepted(sshd, "root") == {"LANG", "LC_*"}


def test_a_relative_include_is_read_from_etc_ssh(tmp_path):
    config = tmp_path / "sshd_config"
    config.write_text("Include sshd_config.d/*.conf\n")
    prelude = (FILES / "ssh_prelude.sh").read_text()
    found = f"sshd_master() {{ echo 1; }}\nsshd_config_of() {{ echo {config}; }}\n"
    text = f'{prelude}\n{helpers()}\n{found}\nsshd_dropin_target\necho "$dropin"'
    done = subprocess.run(["/bin/bash", "-c", text], input="t\n", capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "/etc/ssh/sshd_config.d/gpucluster-t.conf"


def test_when_sshd_does_not_listen_again_the_previous_drop_in_goes_back(sshd):
    previous = "# an older drop-in\nAcceptEnv GPUCLUSTER_*\n"
    sshd["dropin"].write_text(previous)
    # An `ss` that never shows the listener: as if the re-executed sshd had failed.
    done = step("sshd_accept_env_create.sh", sshd, overrides="ss() { :; }")
    assert done.returncode == 1, done.stderr
    assert "did not listen again after the reload" in done.stderr
    assert sshd["dropin"].read_text() == previous
