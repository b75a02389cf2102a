"""The served export and the stand-in NFS client on this machine (shared_fs, client: stand_in),
through the program's own scripts: root squashed, other users as themselves, a client idle past
its NFSv4 lease (libnfs does not renew it) still working, open files included, and the deletes
leaving the files. Needs root (FUSE, a daemon); NFS-Ganesha on 127.0.0.1:12049 only."""

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from components.sharedfs.shared_fs import CLIENT_PROGRAM, FILES
from components.transport import script

pytestmark = pytest.mark.privileged

ROOT = Path("/tmp/gpucluster-nfs-client-test")
PORT = "12049"
LEASE_S = 10
CONFIG = f"""NFS_CORE_PARAM {{ Protocols = 4; NFS_Port = {PORT}; Bind_addr = 127.0.0.1; Enable_NLM = false; Enable_RQUOTA = false; }}
NFS_KRB5 {{ Active_krb5 = false; }}
NFSV4 {{ Graceless = true; Lease_Lifetime = {LEASE_S}; RecoveryRoot = {ROOT}/server/recovery; }}
EXPORT {{ Export_Id = 1; Path = {ROOT}/export; Pseudo = /gpucluster-test; Access_Type = None; Squash = root_squash;
  Anonymous_Uid = 65534; Anonymous_Gid = 65534; Protocols = 4; Transports = TCP; SecType = sys;
  CLIENT {{ Clients = 127.0.0.1; Access_Type = RW; }} FSAL {{ Name = VFS; }} }}
"""  # noqa: E501
SERVER = {"CONF_DIR": f"{ROOT}/server", "DIRECTORY": f"{ROOT}/export", "ADDRESS": "127.0.0.1", "PORT": PORT}
MOUNT = {"SHARED_DIR": f"{ROOT}/shared", "STATE_DIR": f"{ROOT}/state"}


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


def test_served_export_mounted_by_the_stand_in_client_outlives_its_lease():
    assert shutil.which("ganesha.nfsd"), "nfs-ganesha is missing: run `bash .ci/run` (tests/debian-packages.txt)"
    cleanup()
    try:
        run("nfs_server_create.sh", CONFIG_TEXT=CONFIG, **SERVER)
        mount = {"CLIENT": "stand_in", "SERVER": "127.0.0.1", "PORT": PORT, "EXPORT": "/gpucluster-test"}
        run("shared_mount_create.sh", CLIENT_TEXT=CLIENT_PROGRAM.read_text(), **mount, **MOUNT)
        shared, export = Path(MOUNT["SHARED_DIR"]), Path(SERVER["DIRECTORY"])
        assert oct(export.stat().st_mode & 0o7777) == "0o1777"

        (shared / "by-root").write_text("root\n")
        assert as_user(2345, f"echo user > {shared}/by-user").returncode == 0
        assert (export / "by-root").stat().st_uid == 65534, "root was not squashed"
        assert (export / "by-user").stat().st_uid == 2345
        assert as_user(2345, f"rm {shared}/by-root").returncode != 0  # the sticky directory: not theirs

        # Many processes running one script at once (srun -N4 on one host's nodes): one open
        # file, its handle shared (libnfs keeps one stateid per handle).
        job = shared / "job.sh"
        job.write_text("#!/bin/sh\necho ran\n")
        job.chmod(0o755)
        runs = [subprocess.Popen([str(job)], stdout=subprocess.PIPE, text=True) for _ in range(8)]
        assert [r.communicate(timeout=60)[0] for r in runs] == ["ran\n"] * 8

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
        assert not os.path.ismount(shared) and clients() == []
        assert not Path(SERVER["CONF_DIR"]).exists()
        assert sorted(p.name for p in export.iterdir()) == ["after-lease", "by-root", "by-user", "job.sh", "log"]
    finally:
        cleanup()
