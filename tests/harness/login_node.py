"""The login node as its people use it, from the host: each person's key pair made for the run,
SSH through the host's forward, a GPU job submitted from shared_dir and its output read; another
person cannot read it; root and passwords are refused. Used by tests/test_e2e_accounting.py
(bookworm) and tests/harness/release_e2e.py (trixie)."""

import os
import subprocess
from pathlib import Path

from tests.harness.e2e_teardown import LOGIN, STACK


def sh(*argv: str, check: bool = True, timeout: int = 180) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, check=check, timeout=timeout, env=os.environ)


def login_keys(directory: Path) -> dict[str, Path]:
    """A key pair each for alice and bob, made for this run (never committed); carol has none."""
    keys = {}
    for name in ("alice", "bob"):
        keys[name] = directory / f"id_{name}"
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{name}@e2e", "-f", str(keys[name]))
    return keys


def public_keys(keys: dict[str, Path]) -> dict[str, str]:
    return {name: Path(f"{key}.pub").read_text().strip() for name, key in keys.items()}


def ssh_as(key: Path, person: str, command: str, check: bool = True) -> subprocess.CompletedProcess:
    """COMMAND run as PERSON on the login node, through the host's forward (from the host,
    which always reaches it, at its own address)."""
    address = sh("ip", "-4", "-o", "route", "get", "198.51.100.1").stdout.split(" src ")[1].split()[0]
    options = ["-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", "-o", "StrictHostKeyChecking=no"]
    options += ["-o", "UserKnownHostsFile=/dev/null", "-o", "ConnectTimeout=20", "-o", "LogLevel=ERROR"]
    argv = ["ssh", "-i", str(key), "-p", str(LOGIN["host_port"]), *options, f"{person}@{address}", command]
    done = sh(*argv, check=False, timeout=240)
    assert not check or done.returncode == 0, f"{person}: {command} failed: {done.stdout}{done.stderr}"
    return done


def login_node_serves_people(keys: dict[str, Path], shared: str, report: list[str]) -> None:
    """alice submits a GPU job from her shared_dir directory and reads its output; bob cannot."""
    container = f"{STACK}-{LOGIN['name']}"
    own = f"{shared}/alice"
    assert sh("stat", "-c", "%a %U", own).stdout.split() == ["700", "alice"]
    files = "/home/alice/.ssh /home/alice/.ssh/authorized_keys"
    modes = sh("lxc-attach", "-n", container, "--", "sh", "-c", f"stat -c '%a %U' {files}").stdout.split("\n")
    assert modes[:2] == ["700 alice", "600 alice"], modes
    daemons = sh("lxc-attach", "-n", container, "--", "systemctl", "is-active", "slurmd", "slurmctld", check=False)
    assert "active\n" not in daemons.stdout.replace("inactive", ""), daemons.stdout
    job = (
        f"cd {own} && sbatch --wait -J login-gpu --gres=gpu:1 -o gpu-job.out "
        "--wrap 'echo on $(hostname) as $(id -un) CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES' "
        "&& cat gpu-job.out && srun --gres=gpu:1 -J login-srun sh -c 'echo srun on $(hostname)'"
    )
    ran = ssh_as(keys["alice"], "alice", job)
    report.append(f"$ ssh -p {LOGIN['host_port']} alice@<host> '{job}'\n{ran.stdout}")
    assert "on c00" in ran.stdout and "as alice CUDA_VISIBLE_DEVICES=0" in ran.stdout, ran.stdout + ran.stderr
    assert "srun on c00" in ran.stdout, ran.stdout + ran.stderr
    read = ssh_as(keys["alice"], "alice", f"cat {own}/gpu-job.out")
    assert "as alice CUDA_VISIBLE_DEVICES=0" in read.stdout
    refused = ssh_as(keys["bob"], "bob", f"id -un; cat {own}/gpu-job.out", check=False)
    report.append(f"$ ssh bob@<host> 'cat {own}/gpu-job.out'\n{refused.stdout}{refused.stderr}")
    assert refused.stdout.strip() == "bob" and "Permission denied" in refused.stderr, refused
    assert refused.returncode != 0
    # No root, no one else's key, no password (sshd's effective settings).
    assert ssh_as(keys["alice"], "root", "true", check=False).returncode == 255
    assert ssh_as(keys["bob"], "alice", "true", check=False).returncode == 255
    effective = sh("lxc-attach", "-n", container, "--", "sshd", "-T").stdout.splitlines()
    for setting in ("passwordauthentication no", "kbdinteractiveauthentication no", "permitrootlogin no"):
        assert setting in effective, setting
    # Her output goes, so the destroy finds her directory empty and removes it.
    ssh_as(keys["alice"], "alice", f"rm {own}/gpu-job.out")
