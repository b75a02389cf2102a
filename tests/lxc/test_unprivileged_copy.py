"""The login node's unprivileged copy of the image, at script level (components/files/lib/userns.sh):
its files shifted to the user namespace's host ids without following a link, setuid bits kept;
and root's reserved ranges in subuid/subgid, exactly the container's, taken out exactly again."""

import os
import stat
import subprocess
from pathlib import Path

import pytest

from components.common.transport import helpers
from components.slurm.login import login_id_map

pytestmark = pytest.mark.privileged

BASE = 1_000_000


class Person:
    def __init__(self, uid: int):
        self.uid = self.gid = uid


def id_map_config(people: tuple[int, ...]) -> str:
    lines = login_id_map(tuple(Person(uid) for uid in people), BASE)
    return "".join(f"lxc.idmap = {kind} {first} {host} {count}\n" for kind, first, host, count in lines)


def run(script: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["/bin/bash", "-c", f"set -euo pipefail\n{helpers()}\n{script}", "bash", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=60,
    )


def test_the_copy_is_shifted_without_following_links(tmp_path):
    if os.geteuid() != 0:
        pytest.fail("needs root (chown): run as root, as ./test.sh does")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("host root's")
    rootfs = tmp_path / "rootfs"
    (rootfs / "etc").mkdir(parents=True)
    (rootfs / "usr/bin").mkdir(parents=True)
    (rootfs / "home/alice").mkdir(parents=True)
    (rootfs / "etc/passwd").write_text("root:x:0:0::/root:/bin/sh\n")
    su = rootfs / "usr/bin/su"
    su.write_text("#!/bin/sh\n")
    os.chmod(su, 0o4755)
    spool = rootfs / "var/spool"
    spool.mkdir(parents=True)
    os.chown(spool, 0, 8)  # a system group
    os.chown(rootfs / "home/alice", 2001, 2001)  # a person: keeps her ids
    os.chown(rootfs / "etc/passwd", 65534, 65534)
    (rootfs / "etc/link").symlink_to(outside)  # a link out: changed itself, never followed
    (rootfs / "etc/link-file").symlink_to(outside / "secret")
    done = run('rootfs_shift "$1" "$2"', str(rootfs), id_map_config((2001, 2002)))
    assert done.returncode == 0, done.stderr

    def ids(path: Path) -> tuple[int, int]:
        st = path.lstat()
        return st.st_uid, st.st_gid

    assert ids(rootfs) == (BASE, BASE)
    assert ids(rootfs / "etc") == (BASE, BASE)
    assert ids(spool) == (BASE, BASE + 8)
    assert ids(rootfs / "etc/passwd") == (BASE + 65534, BASE + 65534)
    assert ids(rootfs / "home/alice") == (2001, 2001)
    assert ids(rootfs / "etc/link") == (BASE, BASE) and ids(rootfs / "etc/link-file") == (BASE, BASE)
    assert ids(outside) == (0, 0) and ids(outside / "secret") == (0, 0)
    assert stat.S_IMODE(su.stat().st_mode) == 0o4755 and ids(su) == (BASE, BASE)


def test_an_id_outside_the_map_is_named(tmp_path):
    rootfs = tmp_path / "rootfs"
    rootfs.mkdir()
    done = run('rootfs_shift "$1" "$2"', str(rootfs), "lxc.idmap = u 0 1000000 10\nlxc.idmap = g 0 1000000 10\n")
    assert done.returncode == 0, done.stderr  # root (0) is mapped
    (rootfs / "f").write_text("")
    os.chown(rootfs / "f", 20, 0)
    os.chown(rootfs, 0, 0)
    done = run('rootfs_shift "$1" "$2"', str(rootfs), "lxc.idmap = u 0 1000000 10\nlxc.idmap = g 0 1000000 10\n")
    assert done.returncode != 0 and "uid 20 has no host id in the container's map" in done.stderr


def test_root_reserves_exactly_the_containers_ranges_and_gives_them_back(tmp_path):
    etc, record = tmp_path / "etc", tmp_path / "subids"
    etc.mkdir()
    theirs = "alice:100000:65536\nroot:2001:1\n"  # a person's own range; someone else's line like ours
    for kind in "ug":
        (etc / f"sub{kind}id").write_text(theirs)
    env = {"SUBID_ETC": str(etc)}
    claim = 'SUBIDS_DIR=$1; subids_claim "$2" "$3"'
    release = 'SUBIDS_DIR=$1; subids_release "$2"'
    assert run(claim, str(record), "e2e-login", id_map_config((2001,)), env=env).returncode == 0
    ours = [f"root:{BASE}:2001", "root:2001:1", f"root:{BASE + 2002}:63534"]
    assert (etc / "subuid").read_text().splitlines() == [*theirs.splitlines(), *ours]
    assert (etc / "subgid").read_text() == (etc / "subuid").read_text()
    # Again: nothing changes. A person added: the container's lines follow.
    assert run(claim, str(record), "e2e-login", id_map_config((2001,)), env=env).returncode == 0
    assert (etc / "subuid").read_text().splitlines() == [*theirs.splitlines(), *ours]
    assert run(claim, str(record), "e2e-login", id_map_config((2001, 2002)), env=env).returncode == 0
    assert (etc / "subuid").read_text().splitlines() == [
        *theirs.splitlines(),
        f"root:{BASE}:2001",
        "root:2001:2",
        f"root:{BASE + 2003}:63533",
    ]
    # Released: exactly the lines it had, someone else's identical line kept.
    assert run(release, str(record), "e2e-login", env=env).returncode == 0
    assert (etc / "subuid").read_text() == theirs and (etc / "subgid").read_text() == theirs
    assert not record.exists()
    # A container that never claimed releases nothing.
    assert run(release, str(record), "e2e-c000", env=env).returncode == 0
    assert (etc / "subuid").read_text() == theirs
