"""A stand-in NFS client: an NFSv4 export mounted through FUSE, for hosts whose kernel has no
NFS client (shared_fs.client: stand_in), as gpu.stand_in stands in for GPUs.

Usage: python3 nfs_stand_in_client.py SERVER PORT EXPORT_PATH MOUNT_DIR
Runs in the foreground until unmounted (`fusermount -u MOUNT_DIR` or `umount MOUNT_DIR`).
Every request goes to the server with the caller's uid and gid (AUTH_SYS), so the server's
permissions and root squashing apply as with the kernel's client. Nothing is cached here
beyond FUSE's one-second attribute cache: a file written on one host is read on another.
libnfs does not renew the NFSv4 lease while idle: when the server has dropped this client's
state (lease expired, server restarted), the client mounts again and reopens its open files.
Uses libnfs (libnfs13 on Debian 12 and Ubuntu 22.04, libnfs14 on Debian 13 and Ubuntu 24.04) and
fusepy (python3-fusepy).
"""

import ctypes
import errno
import functools
import os
import stat
import sys
import threading
import time

import fusepy


def _libnfs() -> ctypes.CDLL:
    """libnfs 4 (soname 13) or 5 (soname 14): 5 only added functions to those called here."""
    for soname in ("libnfs.so.13", "libnfs.so.14"):
        try:
            return ctypes.CDLL(soname, use_errno=True)
        except OSError:
            continue
    raise OSError("libnfs is not installed (libnfs13 or libnfs14)")


LIBNFS = _libnfs()
RETRIED = ("NFS4ERR_DELAY", "NFS4ERR_GRACE")


class NfsStat(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_uint64)
        for name in [
            "dev",
            "ino",
            "mode",
            "nlink",
            "uid",
            "gid",
            "rdev",
            "size",
            "blksize",
            "blocks",
            "atime",
            "mtime",
            "ctime",
            "atime_nsec",
            "mtime_nsec",
            "ctime_nsec",
            "used",
        ]
    ]


class NfsUrl(ctypes.Structure):
    _fields_ = [("server", ctypes.c_char_p), ("path", ctypes.c_char_p), ("file", ctypes.c_char_p)]


class NfsDirent(ctypes.Structure):
    pass


NfsDirent._fields_ = [("next", ctypes.POINTER(NfsDirent)), ("name", ctypes.c_char_p)]

_P = ctypes.c_void_p
for _name, _restype, _argtypes in (
    ("nfs_init_context", _P, []),
    ("nfs_destroy_context", None, [_P]),
    ("nfs_get_error", ctypes.c_char_p, [_P]),
    ("nfs_parse_url_dir", ctypes.POINTER(NfsUrl), [_P, ctypes.c_char_p]),
    ("nfs_mount", ctypes.c_int, [_P, ctypes.c_char_p, ctypes.c_char_p]),
    ("nfs_set_uid", None, [_P, ctypes.c_int]),
    ("nfs_set_gid", None, [_P, ctypes.c_int]),
    ("nfs_set_timeout", None, [_P, ctypes.c_int]),
    ("nfs_set_autoreconnect", None, [_P, ctypes.c_int]),
    ("nfs_lstat64", ctypes.c_int, [_P, ctypes.c_char_p, ctypes.POINTER(NfsStat)]),
    ("nfs_open", ctypes.c_int, [_P, ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(_P)]),
    ("nfs_create", ctypes.c_int, [_P, ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.POINTER(_P)]),
    ("nfs_close", ctypes.c_int, [_P, _P]),
    ("nfs_pread", ctypes.c_int, [_P, _P, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_void_p]),
    ("nfs_pwrite", ctypes.c_int, [_P, _P, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_void_p]),
    ("nfs_fsync", ctypes.c_int, [_P, _P]),
    ("nfs_truncate", ctypes.c_int, [_P, ctypes.c_char_p, ctypes.c_uint64]),
    ("nfs_ftruncate", ctypes.c_int, [_P, _P, ctypes.c_uint64]),
    ("nfs_mkdir2", ctypes.c_int, [_P, ctypes.c_char_p, ctypes.c_int]),
    ("nfs_rmdir", ctypes.c_int, [_P, ctypes.c_char_p]),
    ("nfs_unlink", ctypes.c_int, [_P, ctypes.c_char_p]),
    ("nfs_rename", ctypes.c_int, [_P, ctypes.c_char_p, ctypes.c_char_p]),
    ("nfs_chmod", ctypes.c_int, [_P, ctypes.c_char_p, ctypes.c_int]),
    ("nfs_chown", ctypes.c_int, [_P, ctypes.c_char_p, ctypes.c_int, ctypes.c_int]),
    ("nfs_opendir", ctypes.c_int, [_P, ctypes.c_char_p, ctypes.POINTER(_P)]),
    ("nfs_readdir", ctypes.POINTER(NfsDirent), [_P, _P]),
    ("nfs_closedir", None, [_P, _P]),
    ("nfs_readlink", ctypes.c_int, [_P, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int]),
    ("nfs_symlink", ctypes.c_int, [_P, ctypes.c_char_p, ctypes.c_char_p]),
):
    _function = getattr(LIBNFS, _name)
    _function.restype, _function.argtypes = _restype, _argtypes


# Answers meaning "the server lost this client's state" (its lease ran out: libnfs does not
# renew it while idle; or the server restarted): mount again, reopen the open files, retry.
# libnfs also keeps one stateid per handle and one sequence per open-owner, which two opens of
# one file (or a failed one) put out of step (NFS4ERR_OLD_STATEID, NFS4ERR_BAD_SEQID): the same
# recovery; and one file is opened once per caller, its handle shared by every open of it by
# the same uid and gid (below): never by another user's, whose open the server has not checked.
STATE_LOST = (
    "NFS4ERR_EXPIRED", "NFS4ERR_STALE_CLIENTID", "NFS4ERR_BAD_STATEID", "NFS4ERR_STALE_STATEID",
    "NFS4ERR_OLD_STATEID", "NFS4ERR_BAD_SEQID",
)  # fmt: skip
NOT_OPENED_AGAIN = os.O_CREAT | os.O_EXCL | os.O_TRUNC


def _caller() -> tuple[int, int]:
    """The uid and gid of the process this FUSE request is for."""
    uid, gid, _ = fusepy.fuse_get_context()
    return uid, gid


class NfsFs(fusepy.Operations):
    """FUSE operations, each one NFS call made with the caller's credentials (one at a time:
    a libnfs context is not thread-safe). `connect` makes a mounted libnfs context."""

    def __init__(self, connect):
        self.connect = connect
        self.nfs = connect()
        self.mutex = threading.Lock()
        self.handles: dict[int, list] = {}  # key -> [libnfs handle, path, flags, opens, (uid, gid)]
        self.opened: dict[int, int] = {}  # FUSE file number -> key of its handle
        self.next_handle = 1

    def _reconnect(self) -> None:
        try:
            fresh = self.connect()
        except SystemExit as failed:  # the server does not answer: this call fails, the next tries again
            print(failed, file=sys.stderr, flush=True)
            raise fusepy.FuseOSError(errno.EIO) from None
        old, self.nfs = self.nfs, fresh
        for entry in self.handles.values():
            handle = _P()
            flags = entry[2] & ~NOT_OPENED_AGAIN
            # Reopened as the user who opened it.
            LIBNFS.nfs_set_uid(self.nfs, entry[4][0])
            LIBNFS.nfs_set_gid(self.nfs, entry[4][1])
            entry[0] = (
                handle if LIBNFS.nfs_open(self.nfs, entry[1].encode(), flags, ctypes.byref(handle)) == 0 else None
            )
        LIBNFS.nfs_destroy_context(old)
        print("the server had lost this client's state: mounted again", file=sys.stderr, flush=True)

    def _call(self, what: str, operation):
        """operation(context) as the caller; a negative result is -errno. The server's "try
        again" answers (NFS4ERR_DELAY, NFS4ERR_GRACE) are tried again for up to 30 s, as the
        kernel's client does, and a lost state once after mounting again; any other failure is
        logged with the server's answer."""
        uid, gid, _ = fusepy.fuse_get_context()
        deadline, remounted = time.monotonic() + 30, False
        while True:
            LIBNFS.nfs_set_uid(self.nfs, uid)
            LIBNFS.nfs_set_gid(self.nfs, gid)
            result = operation(self.nfs)
            if not isinstance(result, int) or result >= 0:
                return result
            error = (LIBNFS.nfs_get_error(self.nfs) or b"").decode(errors="replace")
            if any(lost in error for lost in STATE_LOST) and not remounted:
                self._reconnect()
                remounted = True
                continue
            if not any(retry in error for retry in RETRIED) or time.monotonic() > deadline:
                if result != -errno.ENOENT:
                    print(f"{what} as {uid}:{gid}: {error}", file=sys.stderr, flush=True)
                raise fusepy.FuseOSError(-result)
            time.sleep(0.2)

    def _handle(self, fh: int):
        handle = self.handles[self.opened[fh]][0]
        if handle is None:  # not reopened after the server lost its state
            raise fusepy.FuseOSError(errno.EIO)
        return handle

    def _shared(self, path: str, flags: int) -> int | None:
        """An open of `path` already made by this caller (uid and gid) with the same access, or
        read-write (a handle made by `create` is, and serves a later write-only or read-only open
        of the file: Slurm opens a job's output file once for stdout and again for stderr): its
        handle serves this one too. Another user's open never does: the server checked that
        user's access, not this caller's."""
        wanted, caller = flags & os.O_ACCMODE, _caller()
        for key, entry in self.handles.items():
            if (
                entry[1] == path
                and entry[4] == caller
                and entry[0] is not None
                and entry[2] & os.O_ACCMODE in (wanted, os.O_RDWR)
            ):
                return key
        return None

    def _keep(self, key: int | None, handle, path: str, flags: int) -> int:
        """A FUSE file number for an open of `path`: on the shared handle `key`, or a new one."""
        if key is None:
            key = self.next_handle
            self.handles[key] = [handle, path, flags, 0, _caller()]
        self.handles[key][3] += 1
        number, self.next_handle = self.next_handle, self.next_handle + 1
        self.opened[number] = key
        return number

    def getattr(self, path, fh=None):
        with self.mutex:
            st = NfsStat()
            self._call(f"stat {path}", lambda nfs: LIBNFS.nfs_lstat64(nfs, path.encode(), ctypes.byref(st)))
        return {
            "st_mode": st.mode, "st_nlink": st.nlink, "st_uid": st.uid, "st_gid": st.gid, "st_size": st.size,
            "st_atime": st.atime + st.atime_nsec / 1e9, "st_mtime": st.mtime + st.mtime_nsec / 1e9,
            "st_ctime": st.ctime + st.ctime_nsec / 1e9, "st_blocks": st.blocks, "st_ino": st.ino,
        }  # fmt: skip

    def readdir(self, path, fh):
        with self.mutex:
            directory = _P()
            self._call(f"opendir {path}", lambda nfs: LIBNFS.nfs_opendir(nfs, path.encode(), ctypes.byref(directory)))
            names = []
            try:
                while entry := LIBNFS.nfs_readdir(self.nfs, directory):
                    names.append(entry.contents.name.decode(errors="surrogateescape"))
            finally:
                LIBNFS.nfs_closedir(self.nfs, directory)
        return names

    def open(self, path, flags):
        with self.mutex:
            flags &= ~(os.O_CREAT | os.O_EXCL)
            shared = self._shared(path, flags)
            if shared is not None:
                if flags & os.O_TRUNC:
                    self._truncate_open(path, self.handles[shared][0], 0)
                return self._keep(shared, None, path, flags)
            handle = _P()
            self._call(f"open {path}", lambda nfs: LIBNFS.nfs_open(nfs, path.encode(), flags, ctypes.byref(handle)))
            return self._keep(None, handle, path, flags)

    def create(self, path, mode, fi=None):
        with self.mutex:
            handle = _P()
            # Opened for writing: libnfs's nfs_creat opens an NFSv4 file read-only.
            flags = os.O_RDWR | os.O_CREAT | os.O_TRUNC
            self._call(
                f"create {path}",
                lambda nfs: LIBNFS.nfs_create(nfs, path.encode(), flags, stat.S_IMODE(mode), ctypes.byref(handle)),
            )
            return self._keep(None, handle, path, flags)

    def read(self, path, size, offset, fh):
        with self.mutex:
            buffer = ctypes.create_string_buffer(size)
            count = self._call(
                f"read {path}", lambda nfs: LIBNFS.nfs_pread(nfs, self._handle(fh), offset, size, buffer)
            )
            return buffer.raw[:count]

    def write(self, path, data, offset, fh):
        with self.mutex:
            return self._call(
                f"write {path}", lambda nfs: LIBNFS.nfs_pwrite(nfs, self._handle(fh), offset, len(data), data)
            )

    def truncate(self, path, length, fh=None):
        with self.mutex:
            key = self.opened.get(fh) if fh is not None else self._shared(path, os.O_WRONLY)
            handle = self.handles[key][0] if key in self.handles else None
            if handle is not None:
                self._truncate_open(path, handle, length)
            else:
                self._call(f"truncate {path}", lambda nfs: LIBNFS.nfs_truncate(nfs, path.encode(), length))

    def _truncate_open(self, path: str, handle, length: int) -> None:
        """A file this client holds open is truncated through its open handle: truncating it by
        path opens it once more, which puts libnfs's open state out of step with the server's."""
        self._call(f"truncate {path}", lambda nfs: LIBNFS.nfs_ftruncate(nfs, handle, length))

    def fsync(self, path, datasync, fh):
        with self.mutex:
            self._call(f"fsync {path}", lambda nfs: LIBNFS.nfs_fsync(nfs, self._handle(fh)))

    def release(self, path, fh):
        with self.mutex:
            key = self.opened.pop(fh)
            entry = self.handles[key]
            entry[3] -= 1
            if entry[3] == 0:
                del self.handles[key]
                if entry[0] is not None:
                    LIBNFS.nfs_close(self.nfs, entry[0])

    def mkdir(self, path, mode):
        with self.mutex:
            self._call(f"mkdir {path}", lambda nfs: LIBNFS.nfs_mkdir2(nfs, path.encode(), stat.S_IMODE(mode)))

    def rmdir(self, path):
        with self.mutex:
            self._call(f"rmdir {path}", lambda nfs: LIBNFS.nfs_rmdir(nfs, path.encode()))

    def unlink(self, path):
        with self.mutex:
            self._call(f"unlink {path}", lambda nfs: LIBNFS.nfs_unlink(nfs, path.encode()))

    def rename(self, old, new):
        with self.mutex:
            self._call(f"rename {old}", lambda nfs: LIBNFS.nfs_rename(nfs, old.encode(), new.encode()))

    def chmod(self, path, mode):
        with self.mutex:
            self._call(f"chmod {path}", lambda nfs: LIBNFS.nfs_chmod(nfs, path.encode(), stat.S_IMODE(mode)))

    def chown(self, path, uid, gid):
        with self.mutex:
            self._call(f"chown {path}", lambda nfs: LIBNFS.nfs_chown(nfs, path.encode(), uid, gid))

    def readlink(self, path):
        with self.mutex:
            buffer = ctypes.create_string_buffer(4096)
            self._call(f"readlink {path}", lambda nfs: LIBNFS.nfs_readlink(nfs, path.encode(), buffer, len(buffer)))
            return buffer.value.decode(errors="surrogateescape")

    def symlink(self, target, source):
        with self.mutex:
            self._call(f"symlink {target}", lambda nfs: LIBNFS.nfs_symlink(nfs, source.encode(), target.encode()))

    def utimens(self, path, times=None):
        return 0  # the server stamps writes; setting times is not needed by jobs

    def statfs(self, path):
        return {"f_bsize": 4096, "f_frsize": 4096, "f_blocks": 1 << 30, "f_bfree": 1 << 29, "f_bavail": 1 << 29,
                "f_files": 1 << 24, "f_ffree": 1 << 23, "f_namemax": 255}  # fmt: skip


def connect(server: str, port: int, export: str):
    """A libnfs context mounted on the export (NFSv4, the given port, no portmapper)."""
    context = LIBNFS.nfs_init_context()
    if not context:
        sys.exit("nfs_init_context failed")
    LIBNFS.nfs_set_timeout(context, 10000)
    LIBNFS.nfs_set_autoreconnect(context, -1)
    url = LIBNFS.nfs_parse_url_dir(context, f"nfs://{server}{export}?version=4&nfsport={port}".encode())
    if not url:
        sys.exit(f"bad NFS address: {LIBNFS.nfs_get_error(context).decode()}")
    if LIBNFS.nfs_mount(context, url.contents.server, url.contents.path) != 0:
        sys.exit(f"mount {server}:{export} (port {port}): {LIBNFS.nfs_get_error(context).decode()}")
    return context


def main(argv: list[str]) -> None:
    if len(argv) != 5:
        sys.exit(__doc__.splitlines()[3])
    server, port, export, mount_dir = argv[1], int(argv[2]), argv[3], argv[4]
    mounted = functools.partial(connect, server, port, export)
    # allow_other: jobs of every user, in every node, use the mount; the server checks them.
    fusepy.FUSE(
        NfsFs(mounted), mount_dir, foreground=True, nothreads=True, allow_other=True, fsname=f"{server}:{export}"
    )


if __name__ == "__main__":
    main(sys.argv)
