"""The stand-in NFS client's open handles (components/sharedfs/files/nfs_stand_in_client.py),
against a recording stand-in for libnfs and FUSE's caller: an open shares a handle only with
opens of the same path by the same uid and gid, so every user's first open is an NFS OPEN the
server checks as that user. Nothing here mounts or starts anything."""

import ctypes
import importlib.util
import os
import sys
import types

import pytest

from tests.harness.program_harness import ROOT

CLIENT = ROOT / "components" / "sharedfs" / "files" / "nfs_stand_in_client.py"


class FakeLibnfs:
    """libnfs's calls the client makes on open, read, truncate and close, recorded with the
    uid and gid set on the context at the time."""

    def __init__(self):
        self.uid = self.gid = None
        self.calls: list[tuple] = []
        self.next = 100

    def __getattr__(self, name):
        if name.startswith("nfs_"):
            return _Function(getattr(self, f"do_{name}", lambda *args: 0))
        raise AttributeError(name)

    def do_nfs_set_uid(self, nfs, uid):
        self.uid = uid

    def do_nfs_set_gid(self, nfs, gid):
        self.gid = gid

    def do_nfs_open(self, nfs, path, flags, handle):
        self.next += 1
        handle._obj.value = self.next
        self.calls.append(("open", path.decode(), self.uid, self.gid))
        return 0

    def do_nfs_ftruncate(self, nfs, handle, length):
        self.calls.append(("ftruncate", handle, self.uid, self.gid))
        return 0

    def do_nfs_truncate(self, nfs, path, length):
        self.calls.append(("truncate", path.decode(), self.uid, self.gid))
        return 0

    def do_nfs_close(self, nfs, handle):
        self.calls.append(("close", handle))
        return 0


class _Function:
    """A function of the fake library: the client sets restype and argtypes on it."""

    def __init__(self, call):
        self.call = call

    def __call__(self, *args):
        return self.call(*args)


@pytest.fixture
def client(monkeypatch):
    library = FakeLibnfs()
    caller = {"uid": 0, "gid": 0}
    fusepy = types.ModuleType("fusepy")
    fusepy.Operations = object
    fusepy.FuseOSError = OSError
    fusepy.fuse_get_context = lambda: (caller["uid"], caller["gid"], 4242)
    monkeypatch.setitem(sys.modules, "fusepy", fusepy)
    monkeypatch.setattr(ctypes, "CDLL", lambda *a, **k: library)
    spec = importlib.util.spec_from_file_location("nfs_stand_in_client_under_test", CLIENT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fs = module.NfsFs(lambda: "context")

    def as_user(uid, gid=None):
        caller.update(uid=uid, gid=uid if gid is None else gid)
        return fs

    return library, as_user


def opens(library):
    return [call for call in library.calls if call[0] == "open"]


def test_another_user_s_open_of_a_file_held_open_is_an_open_of_their_own(client):
    library, as_user = client
    owner = as_user(2345).open("/private", os.O_RDWR)
    other = as_user(3456).open("/private", os.O_RDONLY)
    assert opens(library) == [("open", "/private", 2345, 2345), ("open", "/private", 3456, 3456)]
    fs = as_user(0)
    assert fs.opened[owner] != fs.opened[other]


def test_the_same_user_s_opens_share_one_handle(client):
    """Slurm's output file, opened for stdout and again for stderr by the job's user: one NFS open."""
    library, as_user = client
    fs = as_user(2345)
    first = fs.open("/slurm-1.out", os.O_RDWR)
    second = fs.open("/slurm-1.out", os.O_WRONLY | os.O_APPEND)
    assert opens(library) == [("open", "/slurm-1.out", 2345, 2345)]
    assert fs.opened[first] == fs.opened[second]


def test_another_group_is_another_caller(client):
    library, as_user = client
    as_user(2345, 100).open("/f", os.O_RDWR)
    as_user(2345, 200).open("/f", os.O_RDWR)
    assert opens(library) == [("open", "/f", 2345, 100), ("open", "/f", 2345, 200)]


def test_a_truncating_open_by_another_user_does_not_go_through_the_holder_s_handle(client):
    library, as_user = client
    as_user(2345).open("/f", os.O_RDWR)
    library.calls.clear()
    as_user(3456).open("/f", os.O_WRONLY | os.O_TRUNC)
    assert not [call for call in library.calls if call[0] == "ftruncate"]
    assert opens(library) == [("open", "/f", 3456, 3456)]
    library.calls.clear()
    as_user(3456).truncate("/g", 0)  # by path, as the caller: the server checks it
    assert library.calls == [("truncate", "/g", 3456, 3456)]


def test_after_the_server_lost_its_state_each_file_is_reopened_as_its_user(client):
    library, as_user = client
    as_user(2345).open("/a", os.O_RDWR)
    as_user(3456).open("/b", os.O_RDONLY)
    library.calls.clear()
    as_user(0)._reconnect()
    assert opens(library) == [("open", "/a", 2345, 2345), ("open", "/b", 3456, 3456)]
