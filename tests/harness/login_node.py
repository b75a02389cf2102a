"""The login node as its people use it, from the host: each person's key pair made for the run,
SSH through the host's forward, a GPU job submitted from shared_dir and its output read; another
person cannot read it; root and passwords are refused. Used by tests/test_e2e_accounting.py
(bookworm) and tests/harness/release_e2e.py (trixie)."""

import os
import re
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
    # Her keys are root's file, read by sshd outside her home.
    modes = sh("lxc-attach", "-n", container, "--", "stat", "-c", "%a %U", "/etc/ssh/authorized_keys/alice").stdout
    assert modes.split() == ["644", "root"], modes
    login_node_is_unprivileged(container, shared, report)
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


def login_id_base(container: str) -> int:
    """The host id of the login node's root, as its LXC config maps it."""
    config = Path(f"/var/lib/lxc/{container}/gpucluster.conf").read_text()
    return int(re.search(r"^lxc\.idmap = u 0 (\d+) ", config, re.MULTILINE).group(1))


def login_node_is_unprivileged(container: str, shared: str, report: list[str]) -> None:
    """Its root is no host root: a user namespace, a file it makes belongs to an unprivileged
    host id, and it cannot write where the host's root owns (shared_dir itself); the people keep
    their uids (alice's directory in shared_dir is hers on both sides)."""
    uid_map = sh("lxc-attach", "-n", container, "--", "cat", "/proc/self/uid_map").stdout
    report.append(f"$ lxc-attach -n {container} -- cat /proc/self/uid_map\n{uid_map}")
    first = uid_map.split()[:3]
    assert first[:2] != ["0", "0"] and first[0] == "0", uid_map
    base = login_id_base(container)
    assert int(first[1]) == base >= 65536
    sh("lxc-attach", "-n", container, "--", "sh", "-c", "echo made by the login node root > /root/made-by-root")
    made = Path(f"/var/lib/lxc/{container}/rootfs/root/made-by-root")
    owner = sh("stat", "-c", "%u:%g", str(made)).stdout.strip()
    report.append(f"a file its root made, on the host: {owner} ({made})")
    assert owner == f"{base}:{base}", owner
    made.unlink()
    refused = sh("lxc-attach", "-n", container, "--", "touch", f"{shared}/made-by-root", check=False)
    assert refused.returncode != 0 and "Permission denied" in refused.stderr, refused
    assert not Path(f"{shared}/made-by-root").exists()
    inside = sh("lxc-attach", "-n", container, "--", "stat", "-c", "%U %a", f"{shared}/alice").stdout.split()
    assert inside == ["alice", "700"], inside


def person_in_login(container: str, person: str, command: str, check: bool = True) -> subprocess.CompletedProcess:
    """COMMAND as PERSON in the login node, as their shell would run it (without their key)."""
    argv = ["lxc-attach", "-n", container, "--", "setpriv", "--reuid", person, "--regid", person]
    return sh(*argv, "--init-groups", "--reset-env", "sh", "-c", f"cd ~ && {command}", check=check)


# What the people's links point at, whose owner, mode and content must not change.
WATCHED = ("/etc", "/etc/passwd", "/etc/shadow", "/etc/munge", "/home/alice", "/home/bob", "/home/carol")


def watched_state(container: str, shared: str) -> dict[str, str]:
    """Owner, mode, size and checksum of what a person's link could steer root to, in the login
    node and on the host."""
    paths = [*WATCHED, f"{shared}/alice", f"{shared}/bob"]
    stat = ["stat", "-c", "%n %u:%g %a %s", *paths]
    state = {"login": sh("lxc-attach", "-n", container, "--", *stat).stdout}
    state["login sums"] = sh("lxc-attach", "-n", container, "--", "sha256sum", "/etc/passwd", "/etc/shadow").stdout
    state["host"] = sh("stat", "-c", "%n %u:%g %a %s", "/etc", "/etc/passwd", "/etc/shadow", shared).stdout
    state["host sums"] = sh("sha256sum", "/etc/passwd", "/etc/shadow").stdout
    return state


def people_plant_links(container: str, shared: str) -> None:
    """The people turn what root once wrote for them into links to what is not theirs: alice's
    ~/.ssh to /etc, bob's to alice's home, carol's to alice's directory in shared_dir; and a
    link where carol's directory in shared_dir was (as a site whose shared_dir people may write in
    would allow: here only root can, so the host's root plants it)."""
    person_in_login(container, "alice", "rm -rf .ssh && ln -s /etc .ssh && ls -ld .ssh")
    person_in_login(container, "bob", "rm -rf .ssh && ln -s /home/alice .ssh")
    person_in_login(container, "carol", f"rm -rf .ssh && ln -s {shared}/alice .ssh")
    # alice cannot swap her own directory in shared_dir for a link: shared_dir is root's.
    swapped = person_in_login(container, "alice", f"mv {shared}/alice {shared}/alice.old", check=False)
    assert swapped.returncode != 0 and "Permission denied" in swapped.stderr, swapped
    carol = Path(f"{shared}/carol")
    if carol.is_dir() and not carol.is_symlink():
        carol.rmdir()
    carol.symlink_to("/etc")


def links_steered_nothing(container: str, shared: str, before: dict[str, str]) -> None:
    """After the setup ran again: nothing changed owner, mode or content; the links are still links."""
    assert watched_state(container, shared) == before
    for person, target in (("alice", "/etc"), ("bob", "/home/alice"), ("carol", f"{shared}/alice")):
        link = sh("lxc-attach", "-n", container, "--", "readlink", f"/home/{person}/.ssh").stdout.strip()
        assert link == target, (person, link)
    assert os.readlink(f"{shared}/carol") == "/etc"
    assert sh("stat", "-c", "%u:%g %a", "/etc").stdout.split() == ["0:0", "755"]
    Path(f"{shared}/carol").unlink()  # the test's own link goes: destroy finds what it made
