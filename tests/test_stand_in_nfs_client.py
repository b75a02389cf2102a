"""The served export and the stand-in NFS client on this machine (shared_fs, client: stand_in),
through the program's own scripts: root squashed, other users as themselves, a client idle past
its NFSv4 lease (libnfs does not renew it) still working, open files included, and the deletes
leaving the files. Needs root (FUSE, a daemon); NFS-Ganesha on 127.0.0.1:12049 only."""

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from components.common.transport import script
from components.composition.stack_config import parse_stack_config
from components.sharedfs.shared_fs import CLIENT_PROGRAM, FILES, render_ganesha_conf
from tests.harness.program_harness import stack_config

pytestmark = pytest.mark.privileged

ROOT = Path("/tmp/gpucluster-nfs-client-test")
PORT = "12049"
LEASE_S = 10
CONFIG = f"""NFS_CORE_PARAM {{ Protocols = 4; NFS_Port = {PORT}; Bind_addr = 127.0.0.1; Enable_NLM = false; Enable_RQUOTA = false; }}
NFS_KRB5 {{ Active_krb5 = false; }}
NFSV4 {{ Graceless = true; Lease_Lifetime = {LEASE_S}; RecoveryRoot = {ROOT}/server/recovery; }}
EXPORT {{ Export_Id = 1; Path = {ROOT}/export; Pseudo = /gpucluster-test; Access_Type = None; Squash = root_squash;
  Anonymous_Uid = 65534; Anonymous_Gid = 65534; Protocols = 4; Transports = TCP; SecType = sys; PrivilegedPort = true;
  CLIENT {{ Clients = 127.0.0.1; Access_Type = RW; }} FSAL {{ Name = VFS; }} }}
"""  # noqa: E501
# A user-space NFS client (libnfs, as the stand-in uses it) claiming uid 1234 (AUTH_SYS):
# `mounted <rc>` and, once mounted, `created <rc>` for a file made as that uid.
FORGER = """
import ctypes, sys
class Url(ctypes.Structure):
    _fields_ = [("server", ctypes.c_char_p), ("path", ctypes.c_char_p), ("file", ctypes.c_char_p)]
nfs = ctypes.CDLL("libnfs.so.13")
P = ctypes.c_void_p
nfs.nfs_init_context.restype = P
nfs.nfs_parse_url_dir.restype, nfs.nfs_parse_url_dir.argtypes = ctypes.POINTER(Url), [P, ctypes.c_char_p]
nfs.nfs_mount.argtypes = [P, ctypes.c_char_p, ctypes.c_char_p]
nfs.nfs_set_uid.argtypes = [P, ctypes.c_int]
nfs.nfs_set_timeout.argtypes = [P, ctypes.c_int]
nfs.nfs_create.argtypes = [P, ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.POINTER(P)]
context = nfs.nfs_init_context()
nfs.nfs_set_timeout(context, 5000)
url = nfs.nfs_parse_url_dir(context, f"nfs://127.0.0.1/gpucluster-test?version=4&nfsport={sys.argv[1]}".encode())
rc = nfs.nfs_mount(context, url.contents.server, url.contents.path)
print("mounted", rc)
if rc == 0:
    nfs.nfs_set_uid(context, 1234)
    handle = P()
    print("created", nfs.nfs_create(context, sys.argv[2].encode(), 0o101, 0o644, ctypes.byref(handle)))
"""
SERVER = {
    "CLUSTER": "nfs-client-test",
    "CONF_DIR": f"{ROOT}/server",
    "DIRECTORY": f"{ROOT}/export",
    "ADDRESS": "127.0.0.1",
    "PORT": PORT,
}
# The mount's NFS guard, here for a documentation subnet (192.0.2.0/24) that no traffic comes from.
GUARD_TAG = "gpucluster:nfs-client-test:guard:nfs"
MOUNT = {
    "SHARED_DIR": f"{ROOT}/shared",
    "STATE_DIR": f"{ROOT}/state",
    "NFS_GUARD": f"{GUARD_TAG},nfs,127.0.0.1,{PORT},192.0.2.0/24,input",
}


def guard_rules() -> list[str]:
    saved = subprocess.run(["iptables-save"], capture_output=True, text=True, check=True).stdout
    return [line for line in saved.splitlines() if GUARD_TAG in line]


def run(name: str, **environment) -> None:
    done = subprocess.run(
        ["/bin/bash", "-c", script(FILES / name)],
        env={**os.environ, **environment},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"{name}: {done.stderr}"


def as_user(uid: int, command: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "sh", "-c", command],
        capture_output=True,
        text=True,
        check=False,
    )


def clients() -> list[str]:
    ps = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True, check=True).stdout
    return [line.split()[0] for line in ps.splitlines() if f"{ROOT}/state/nfs-client.py" in line]


def cleanup() -> None:
    subprocess.run(["umount", "-l", MOUNT["SHARED_DIR"]], capture_output=True, check=False)
    for pid in clients():
        subprocess.run(["kill", pid], check=False)
    pid_file = Path(SERVER["CONF_DIR"], "ganesha.pid")
    if pid_file.exists():
        subprocess.run(["kill", pid_file.read_text().strip()], check=False)
        time.sleep(1)
    shutil.rmtree(ROOT, ignore_errors=True)
    if guard_rules():
        run("shared_mount_delete.sh", **MOUNT)


def test_the_product_s_export_asks_for_privileged_ports_as_this_test_s_server_does():
    cluster = stack_config("twohost")
    cluster["cluster"]["shared_fs"] = {"kind": "served", "directory": "/srv/gpucluster/duo/export"}
    conf = render_ganesha_conf(parse_stack_config(cluster).cluster)
    for setting in ("PrivilegedPort = true;", "SecType = sys;", "Squash = root_squash;"):
        assert setting in conf and setting in CONFIG
    assert re.search(r"Clients = [0-9., ]+;", conf)  # addresses of hosts: no container subnet


def test_served_export_mounted_by_the_stand_in_client_outlives_its_lease():
    assert shutil.which("ganesha.nfsd"), "nfs-ganesha is missing: run `bash .ci/run` (tests/debian-packages.txt)"
    cleanup()
    try:
        run("nfs_server_create.sh", CONFIG_TEXT=CONFIG, **SERVER)
        mount = {"CLIENT": "stand_in", "SERVER": "127.0.0.1", "PORT": PORT, "EXPORT": "/gpucluster-test"}
        run("shared_mount_create.sh", CLIENT_TEXT=CLIENT_PROGRAM.read_text(), **mount, **MOUNT)
        assert len(guard_rules()) == 4  # FORWARD and INPUT, TCP and UDP
        shared, export = Path(MOUNT["SHARED_DIR"]), Path(SERVER["DIRECTORY"])
        assert oct(export.stat().st_mode & 0o7777) == "0o1777"

        (shared / "by-root").write_text("root\n")
        assert as_user(2345, f"echo user > {shared}/by-user").returncode == 0
        assert (export / "by-root").stat().st_uid == 65534, "root was not squashed"
        assert (export / "by-user").stat().st_uid == 2345
        assert as_user(2345, f"rm {shared}/by-root").returncode != 0  # the sticky directory: not theirs

        # N3: a job's own NFS client, from an unprivileged port, claiming another uid: refused;
        # root's (a reserved port, as the kernel and the stand-in client use) is served.
        forger = ROOT / "forger.py"
        forger.write_text(FORGER)
        forger.chmod(0o644)
        forged = as_user(2345, f"/usr/bin/python3 {forger} {PORT} /forged-by-2345")
        assert "mounted 0" not in forged.stdout and forged.returncode == 0, forged
        assert not (export / "forged-by-2345").exists()
        privileged = subprocess.run(
            ["/usr/bin/python3", str(forger), PORT, "/made-by-root-as-1234"], capture_output=True, text=True
        )
        assert "created 0" in privileged.stdout, privileged
        assert (export / "made-by-root-as-1234").stat().st_uid == 1234
        (export / "made-by-root-as-1234").unlink()

        # Many processes running one script at once (srun -N4 on one host's nodes): one open
        # file, its handle shared (libnfs keeps one stateid per handle).
        job = shared / "job.sh"
        job.write_text("#!/bin/sh\necho ran\n")
        job.chmod(0o755)
        runs = [subprocess.Popen([str(job)], stdout=subprocess.PIPE, text=True) for _ in range(8)]
        assert [r.communicate(timeout=60)[0] for r in runs] == ["ran\n"] * 8

        # Slurm's default output file (sbatch without -o): the job's user opens slurm-<job>.out
        # for stdout (created, truncated) and again for stderr, and both write; a file opened
        # once more with truncation is truncated through the open handle. A second NFSv4 open of
        # a file the client held open put libnfs's open state out of step with the server's:
        # the client mounted again and the job's writes failed (EIO).
        opens = ROOT / "opens.py"
        opens.write_text(
            "import os, sys\n"
            "path, flags = sys.argv[1], os.O_WRONLY | os.O_CREAT\n"
            "out, err = os.open(path, flags | os.O_TRUNC, 0o644), os.open(path, flags | os.O_APPEND, 0o644)\n"
            "os.write(out, b'out\\n'); os.write(err, b'err\\n')\n"
            "print(open(path).read(), end='')\n"
            "again = os.open(path, flags | os.O_TRUNC, 0o644)\n"
            "os.write(again, b'again\\n')\n"
            "for fd in (out, err, again): os.close(fd)\n"
        )
        opens.chmod(0o644)
        opened = as_user(2345, f"/usr/bin/python3 {opens} {shared}/slurm-1.out")
        assert (opened.returncode, opened.stdout) == (0, "out\nerr\n"), opened
        assert (export / "slurm-1.out").read_text() == "again\n"
        assert "mounted again" not in Path(MOUNT["STATE_DIR"], "nfs-client.log").read_text()
        (export / "slurm-1.out").unlink()

        # One user's open file is not another's: the second user's open is an NFS OPEN of
        # their own, which the server refuses (mode 0600), not a share of the holder's handle.
        holder = subprocess.Popen(
            ["setpriv", "--reuid=2345", "--regid=2345", "--clear-groups", "/usr/bin/python3", "-c",
             f"import os, sys; fd = os.open('{shared}/private', os.O_RDWR | os.O_CREAT, 0o600); "
             "os.write(fd, b'secret'); print('open', flush=True); sys.stdin.read()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert holder.stdout.readline() == "open\n"
            peek = as_user(3456, f"cat {shared}/private")
            assert peek.returncode != 0 and "secret" not in peek.stdout, peek
        finally:
            holder.communicate("", timeout=60)
        (export / "private").unlink()

        with open(shared / "log", "w") as log:
            log.write("before\n")
            log.flush()
            time.sleep(2 * LEASE_S + 5)  # idle: the server drops the client's state
            (shared / "after-lease").write_text("after\n")
            log.write("after\n")
        assert (shared / "after-lease").read_text() == "after\n"
        assert (export / "log").read_text() == "before\nafter\n"

        run("shared_mount_delete.sh", **MOUNT)
        run("nfs_server_delete.sh", **{key: SERVER[key] for key in ("CONF_DIR", "DIRECTORY")})
        assert not os.path.ismount(shared) and clients() == [] and guard_rules() == []
        assert not Path(SERVER["CONF_DIR"]).exists()
        assert sorted(p.name for p in export.iterdir()) == [
            ".gpucluster-served",
            "after-lease",
            "by-root",
            "by-user",
            "job.sh",
            "log",
        ]
    finally:
        cleanup()
