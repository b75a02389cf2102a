"""Unpacking an untrusted tar archive (review/tarball.py), on both of its paths: Python's
`filter="data"` where the interpreter has it, and the checks of its own where it has not
(Debian 12's python3, 3.11.2). The fallback is forced here on any interpreter."""

import copy
import io
import os
import stat
import subprocess
import tarfile
from pathlib import Path

import pytest

from review import diff, tarball
from tests.harness.program_harness import ROOT

# The paths this interpreter has: the fallback always, the data filter where PEP 706 is in.
PATHS = [pytest.param(False, id="fallback")]
if hasattr(tarfile, "data_filter"):
    PATHS.append(pytest.param(True, id="data-filter"))


@pytest.fixture(params=PATHS)
def path(request, monkeypatch):
    monkeypatch.setattr(tarball, "PEP706", request.param)
    return request.param


def entry(name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"", **attrs) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    info.mode = 0o755 if kind == tarfile.DIRTYPE else 0o644
    for key, value in attrs.items():
        setattr(info, key, value)
    return info, data


def archive(at: Path, *entries: tuple[tarfile.TarInfo, bytes]) -> Path:
    with tarfile.open(at, "w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in entries:
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return at


def snapshot(folder: Path) -> dict[str, tuple]:
    """Every path under `folder` (links not followed) with its type, mode and content."""
    found = {}
    for path in sorted(folder.rglob("*")):
        st = path.lstat()
        content = path.read_bytes() if stat.S_ISREG(st.st_mode) else os.readlink(path) if path.is_symlink() else None
        found[str(path.relative_to(folder))] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), content)
    return found


# OUTSIDE stands for the test's folder around the target (an absolute path).
HOSTILE = {
    "a member in the parent folder": [entry("../escaped", data=b"x")],
    "a member deep under ../": [entry("ok/../../escaped", data=b"x")],
    "an absolute name": [entry("OUTSIDE/escaped-absolute", data=b"x")],
    "a symbolic link out": [entry("out", tarfile.SYMTYPE, linkname="../escaped")],
    "a symbolic link to an absolute path": [entry("etc", tarfile.SYMTYPE, linkname="/etc")],
    "a file written through a link inside": [
        entry("sub", tarfile.DIRTYPE),
        entry("sub/up", tarfile.SYMTYPE, linkname=".."),
        entry("sub/up/../escaped", data=b"x"),
    ],
    "a hard link out": [entry("hard", tarfile.LNKTYPE, linkname="../outside.txt")],
    "a hard link to an absolute path": [entry("passwd", tarfile.LNKTYPE, linkname="/etc/passwd")],
    "a character device": [entry("null", tarfile.CHRTYPE, devmajor=1, devminor=3)],
    "a block device": [entry("disk", tarfile.BLKTYPE, devmajor=8, devminor=0)],
    "a fifo": [entry("pipe", tarfile.FIFOTYPE)],
}


@pytest.mark.parametrize("case", HOSTILE)
def test_a_hostile_member_is_refused_and_nothing_outside_changes(tmp_path, path, case):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "outside.txt").write_text("mine\n")
    hostile = [(copy.copy(info), data) for info, data in HOSTILE[case]]
    for info, _ in hostile:
        info.name = info.name.replace("OUTSIDE", str(outside))
    tar = archive(tmp_path / "hostile.tar", entry("first.txt", data=b"fine\n"), *hostile)
    target = outside / "target"
    before = snapshot(outside)
    etc_passwd = Path("/etc/passwd").stat()
    with pytest.raises(tarball.UnsafeMemberError, match=r"^refusing '") as refused:
        tarball.extract(tar, target)
    assert refused.value.member.name == hostile[-1][0].name
    # What came before the hostile member is there; nothing outside the target changed.
    assert (target / "first.txt").read_text() == "fine\n"
    assert {k: v for k, v in snapshot(outside).items() if k != "target" and not k.startswith("target/")} == before
    assert Path("/etc/passwd").stat().st_nlink == etc_passwd.st_nlink
    assert not {kind for kind, _, _ in snapshot(target).values()} & {stat.S_IFCHR, stat.S_IFBLK, stat.S_IFIFO}


def test_a_plain_archive_extracts_whole_with_safe_modes(tmp_path, path):
    tar = archive(
        tmp_path / "plain.tar",
        entry("top", tarfile.DIRTYPE),
        entry("top/readonly", tarfile.DIRTYPE, mode=0o555),
        entry("top/readonly/inner.txt", data=b"inner\n"),
        entry("top/run.sh", data=b"#!/bin/sh\n", mode=0o755),
        entry("top/setuid", data=b"s", mode=0o4777, uid=4242, gid=4242, uname="nobody-here", gname="nobody-here"),
        entry("top/private", data=b"p", mode=0o400),
        entry("top/link", tarfile.SYMTYPE, linkname="run.sh"),
        entry("top/hard", tarfile.LNKTYPE, linkname="top/run.sh", mode=0o755),
        entry("top/up", tarfile.SYMTYPE, linkname="../top"),
    )
    target = tmp_path / "target"
    tarball.extract(tar, target)
    found = snapshot(target)
    assert found["top/readonly/inner.txt"][2] == b"inner\n"
    assert found["top/run.sh"][1:] == (0o755, b"#!/bin/sh\n")
    # No setuid bit, no group/other write, no owner from the archive; the owner can write.
    assert found["top/setuid"][1] == 0o755
    assert (target / "top" / "setuid").stat().st_uid == os.geteuid()
    assert found["top/private"][1] == 0o600
    assert found["top/link"] == (stat.S_IFLNK, found["top/link"][1], "run.sh")
    assert (target / "top" / "hard").stat().st_ino == (target / "top" / "run.sh").stat().st_ino
    assert os.readlink(target / "top" / "up") == "../top"
    assert stat.S_ISDIR(found["top/readonly"][0])


def test_a_commit_of_this_repository_extracts_file_for_file(tmp_path, path):
    """review.diff's (and the upgrade snapshots') use: `git archive` of a commit."""
    tree = diff.extract("HEAD", tmp_path / "tree")
    listed = subprocess.run(["git", "ls-tree", "-r", "--name-only", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    files = {str(p.relative_to(tree)) for p in tree.rglob("*") if not p.is_dir()}
    assert files == set(listed.stdout.splitlines())
    committed = subprocess.run(["git", "show", "HEAD:up.sh"], cwd=ROOT, capture_output=True, check=True).stdout
    assert os.access(tree / "up.sh", os.X_OK) and (tree / "up.sh").read_bytes() == committed
