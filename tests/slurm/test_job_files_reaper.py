"""What ended jobs left in a node's /dev/shm and /tmp goes (components/slurm/files/
job_files_reaper.sh, run by a timer in every node): a person's files once no process of theirs
is left, never a link's target, never another uid's file, never root's or a system account's,
never a file newer than the check. Run on two directories here with files of made-up uids
(privileged: chown, and a process under another uid)."""

import os
import subprocess
import time
from pathlib import Path

import pytest

from components.slurm.node import JOB_FILES_REAPER_SOURCE

pytestmark = pytest.mark.privileged
ENDED, RUNNING, OTHER_ENDED = 41500, 41501, 41502  # people's uids (1000-60000) no one here has


def make(path: Path, uid: int, text: str = "x") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    os.chown(path, uid, uid)
    return path


def test_an_ended_job_s_files_go_and_nothing_else(tmp_path):
    shm, tmp, outside = tmp_path / "shm", tmp_path / "tmp", tmp_path / "outside"
    for directory in (shm, tmp, outside):
        directory.mkdir()
    ended = [make(shm / "torch_123", ENDED), make(tmp / "job" / "part.bin", ENDED)]
    os.chown(tmp / "job", ENDED, ENDED)
    # Links of the ended job's person to what is theirs elsewhere, and to a directory.
    target = make(outside / "results.txt", ENDED, "keep")
    (tmp / "link").symlink_to(target)
    (tmp / "dirlink").symlink_to(outside)
    os.chown(tmp / "link", ENDED, ENDED, follow_symlinks=False)
    os.chown(tmp / "dirlink", ENDED, ENDED, follow_symlinks=False)
    # A directory of theirs that holds another person's file: the file and the directory stay.
    make(tmp / "shared" / "theirs", RUNNING)
    os.chown(tmp / "shared", ENDED, ENDED)
    kept = [
        make(shm / "running-job", RUNNING),
        make(shm / "root-file", 0),
        make(tmp / "nobody", 65534),
        make(tmp / "system", 120),
        make(tmp / "newer", OTHER_ENDED),
    ]
    # Everything made a minute ago (a job that ended), but one file made after the check.
    for path in [*shm.rglob("*"), *tmp.rglob("*")]:
        os.utime(path, (time.time() - 60,) * 2, follow_symlinks=False)
    subprocess.run(["touch", "-d", "+1 hour", str(tmp / "newer")], check=True)
    holder = subprocess.Popen(["setpriv", f"--reuid={RUNNING}", f"--regid={RUNNING}", "--clear-groups", "sleep", "60"])
    try:
        done = subprocess.run(
            ["bash", str(JOB_FILES_REAPER_SOURCE), str(shm), str(tmp)], capture_output=True, text=True, timeout=60
        )
    finally:
        holder.kill()
        holder.wait()
    assert done.returncode == 0, done.stderr
    assert [path for path in ended if path.exists()] == []
    assert not (tmp / "link").is_symlink() and not (tmp / "dirlink").is_symlink()
    assert target.read_text() == "keep", "a link was followed"
    assert outside.is_dir() and (outside / "results.txt").exists()
    assert (tmp / "shared" / "theirs").exists() and (tmp / "shared").is_dir()
    assert f"uid {ENDED}: 1 of its entries stay in {tmp}" in done.stdout
    assert [path.name for path in kept if not path.exists()] == []
    assert not (tmp / "job").exists()


def test_missing_directories_are_no_error(tmp_path):
    done = subprocess.run(
        ["bash", str(JOB_FILES_REAPER_SOURCE), str(tmp_path / "absent")], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0 and done.stdout == "" and done.stderr == ""
