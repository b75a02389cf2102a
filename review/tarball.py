"""Unpacking a tar archive without trusting it: `extract(archive, into)`.

Python's own `filter="data"` (PEP 706) does it where the interpreter has it; Debian 12's
python3 (3.11.2) has not, so there the same checks run here. Either way no member lands
outside `into`, no link points outside it, no device or fifo is made, no absolute name is
accepted, no setuid, setgid or group/other write bit is set and no owner is taken from the
archive. The first member that breaks one stops the extraction with UnsafeMemberError; what
came before it stays, so extract into a fresh directory.
"""

import copy
import os
import tarfile
from collections.abc import Iterator
from pathlib import Path

# Looked up at each call: a test takes the fallback on an interpreter that has the filter.
PEP706 = hasattr(tarfile, "data_filter")


class UnsafeMemberError(tarfile.TarError):
    """A member that would write or point outside the target, or is not plain data."""

    def __init__(self, member: tarfile.TarInfo, why: str):
        super().__init__(f"refusing {member.name!r} from the archive: {why}")
        self.member = member


def _inside(path: str, dest: str) -> bool:
    return os.path.commonpath([os.path.realpath(path), dest]) == dest


def _check(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo:
    """`member` as the data filter would extract it, or UnsafeMemberError. `dest` is real: each
    member is checked just before it is written, so a link extracted earlier is followed."""
    if os.path.isabs(member.name):
        raise UnsafeMemberError(member, "an absolute name")
    if not _inside(os.path.join(dest, member.name), dest):
        raise UnsafeMemberError(member, f"it would be written outside {dest}")
    if member.issym() or member.islnk():
        if os.path.isabs(member.linkname):
            raise UnsafeMemberError(member, f"a link to the absolute path {member.linkname!r}")
        # A symbolic link resolves from its own folder, a hard link from the archive's root.
        base = os.path.dirname(os.path.join(dest, member.name)) if member.issym() else dest
        if not _inside(os.path.join(base, member.linkname), dest):
            raise UnsafeMemberError(member, f"a link to {member.linkname!r}, outside {dest}")
    if not (member.isreg() or member.islnk() or member.isdir() or member.issym()):
        raise UnsafeMemberError(member, "a device, fifo or other special file")
    if member.isdir():
        mode = 0o755
    else:
        mode = member.mode & 0o755
        if not mode & 0o100:
            mode &= ~0o111
        mode |= 0o600
    # Owned by whoever extracts (numeric_owner: the names in the archive are not looked up).
    # A copy: TarInfo.replace came with PEP 706.
    member = copy.copy(member)
    member.mode, member.uid, member.gid, member.uname, member.gname = mode, os.geteuid(), os.getegid(), "", ""
    return member


def _checked(tar: tarfile.TarFile, dest: str) -> Iterator[tarfile.TarInfo]:
    # extractall consumes this lazily, one member extracted before the next is checked.
    for member in tar:
        yield _check(member, dest)


def _strict_data_filter(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo:
    # The data filter strips a leading "/"; an absolute name is refused on both paths.
    if os.path.isabs(member.name):
        raise UnsafeMemberError(member, "an absolute name")
    try:
        return tarfile.data_filter(member, dest)
    except tarfile.FilterError as error:
        raise UnsafeMemberError(member, str(error)) from error


def extract(archive: Path, into: Path) -> None:
    """Every member of the tar file `archive` under `into` (made when missing)."""
    with tarfile.open(archive) as tar:
        if PEP706:
            tar.extractall(into, filter=_strict_data_filter)
        else:
            dest = os.path.realpath(into)
            tar.extractall(into, members=_checked(tar, dest), numeric_owner=True)
