"""The cluster snapshot writer (components/app/files/cluster_status.py) and the scripts that
start and stop it on the host; no cluster needed (a snapshot of an unreachable cluster carries
Slurm's error)."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from components.app.web_app import FILES, STATUS_WRITER_SOURCE
from components.common.transport import INTERPRETER, script

sys.path.insert(0, str(FILES))
from cluster_status import gres_count, write_atomically


@pytest.mark.parametrize(
    ("gres", "count"),
    [("gpu:1", 1), ("gpu:tesla:2(S:0-1)", 2), ("gpu:0(IDX:N/A)", 0), ("(null)", 0), ("gpu:1,mps:100", 1), ("", 0)],
)
def test_gpus_are_counted_from_gres_strings(gres, count):
    assert gres_count(gres) == count


def test_a_snapshot_of_an_unreachable_cluster_says_why(tmp_path):
    out = tmp_path / "cluster.json"
    (tmp_path / "slurm.conf").write_text("")  # Slurm refuses it at once (no ClusterName)
    subprocess.run(
        [sys.executable, str(STATUS_WRITER_SOURCE), "t", str(out), "5", "--once"],
        env={**os.environ, "SLURM_CONF": str(tmp_path / "slurm.conf")},
        check=True,
        timeout=60,
    )
    snapshot = json.loads(out.read_text())
    assert snapshot["cluster"] == "t" and snapshot["nodes"] == []
    assert "Unable to process configuration file" in snapshot["error"]
    assert abs(snapshot["written_at"] - time.time()) < 60
    assert oct(out.stat().st_mode & 0o777) == "0o644"


def test_a_link_planted_at_a_temporary_name_is_not_followed(tmp_path, monkeypatch):
    """The writer is root. Links at its temporary names (the fixed one an earlier release used,
    and the names its random generator yields next, made predictable here) to a file and to a
    path that does not exist: neither is written through, and the snapshot still is."""
    status_dir = tmp_path / "status"
    status_dir.mkdir()
    precious = tmp_path / "precious"
    precious.write_text("root's file\n")
    absent = tmp_path / "made-by-root"
    out = status_dir / "cluster.json"
    (status_dir / ".cluster.json.tmp").symlink_to(precious)
    subprocess.run([sys.executable, str(STATUS_WRITER_SOURCE), "t", str(out), "5", "--once"], check=True, timeout=60)
    assert json.loads(out.read_text())["cluster"] == "t"
    planted = ["planted1", "planted2", "planted3"]
    for name, target in zip(planted, [precious, absent, precious], strict=True):
        (status_dir / f".cluster.json.{name}.tmp").symlink_to(target)
    monkeypatch.setattr(tempfile, "_get_candidate_names", lambda: iter([*planted, "fresh"]))
    write_atomically(out, {"cluster": "u"})
    assert json.loads(out.read_text()) == {"cluster": "u"} and not out.is_symlink()
    assert oct(out.stat().st_mode & 0o777) == "0o644"
    assert precious.read_text() == "root's file\n" and not absent.exists()
    links = sorted(p.name for p in status_dir.iterdir() if p.is_symlink())
    assert links == [*(f".cluster.json.{name}.tmp" for name in planted), ".cluster.json.tmp"]
    assert sorted(p.name for p in status_dir.iterdir() if not p.is_symlink()) == ["cluster.json"]


def writer_pid(cluster_dir: Path) -> int | None:
    try:
        pid = int((cluster_dir / "cluster-status.pid").read_text())
    except FileNotFoundError:
        return None
    return pid if Path(f"/proc/{pid}").exists() else None


@pytest.fixture
def open_dir():
    """A directory others may enter (pytest's own are root's alone), as the snapshot's readers
    (the web app's service user) need."""
    path = Path(tempfile.mkdtemp(prefix="gpucluster-status-test-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


def uid_of(pid: int) -> int:
    (line,) = [line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("Uid:")]
    return int(line.split()[1])


@pytest.mark.privileged  # root's daemon, in a directory given to root
def test_the_writer_starts_once_restarts_on_change_and_is_removed(open_dir):
    tmp_path = open_dir
    cluster_dir = tmp_path / "cluster"
    (tmp_path / "slurm.conf").write_text("")
    # An earlier release's snapshot directory: nobody's, holding that release's fixed
    # temporary name (here a link to a file of root's).
    precious = tmp_path / "precious"
    precious.write_text("root's file\n")
    (cluster_dir / "status").mkdir(parents=True)
    (cluster_dir / "status" / ".cluster.json.tmp").symlink_to(precious)
    os.chown(cluster_dir / "status", 65534, 65534)
    environment = {
        "CLUSTER": "t",
        "CLUSTER_DIR": str(cluster_dir),
        "STATUS_DIR": str(cluster_dir / "status"),
        "STATUS_INTERVAL_S": "1",
        "STATUS_WRITER_SOURCE": STATUS_WRITER_SOURCE.read_text(),
        # A deploy's environment (`pulumi up` in CI): none of it reaches the writer.
        "RUNNER_TRACKING_ID": "github_status-test",
        "PULUMI_CONFIG_PASSPHRASE": "the deploy's passphrase",
        "AWS_SECRET_ACCESS_KEY": "the deploy role's key",
    }

    def run(name: str, **changes) -> None:
        subprocess.run([*INTERPRETER, script(FILES / name)], env={**environment, **changes}, check=True, timeout=60)

    try:
        run("webapp_status_create.sh")
        first = writer_pid(cluster_dir)
        assert first and (cluster_dir / "status").is_dir()
        # Root's alone, readable by all (the web app's container reads it through a bind mount).
        made = (cluster_dir / "status").stat()
        assert (made.st_uid, made.st_gid, oct(made.st_mode & 0o777)) == (0, 0, "0o755")
        assert not (cluster_dir / "status" / ".cluster.json.tmp").is_symlink()
        assert precious.read_text() == "root's file\n"
        # Root (its Slurm client attaches to the cluster's container), and nothing of the deploy's.
        assert uid_of(first) == 0
        held = {p.split(b"=")[0].decode() for p in Path(f"/proc/{first}/environ").read_bytes().split(b"\0") if p}
        assert held == {"PATH", "LC_ALL", "SLURM_BIN"}, held
        deadline = time.monotonic() + 10
        while not (cluster_dir / "status" / "cluster.json").exists():
            assert time.monotonic() < deadline, "no snapshot written"
            time.sleep(0.1)
        run("webapp_status_create.sh")
        assert writer_pid(cluster_dir) == first, "a second create restarted the writer"
        written = json.loads((cluster_dir / "status" / "cluster.json").read_text())["written_at"]
        time.sleep(2.5)
        assert json.loads((cluster_dir / "status" / "cluster.json").read_text())["written_at"] > written
        run("webapp_status_create.sh", STATUS_INTERVAL_S="2")
        second = writer_pid(cluster_dir)
        assert second and second != first and not Path(f"/proc/{first}").exists()
    finally:
        run("webapp_status_delete.sh")
    assert writer_pid(cluster_dir) is None
    assert sorted(p.name for p in cluster_dir.iterdir()) == []
    run("webapp_status_delete.sh")  # succeeds when already gone


def test_a_job_name_that_breaks_the_line_neither_stops_the_writer_nor_makes_a_job(tmp_path):
    """A newline in a job name (sbatch -J) puts the rest of the name on a line of its own."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fakes = {
        "sinfo": "printf 'c000|IDLE|gpu:1|gpu:0(IDX:N/A)|\\n'",
        "squeue": "printf '7|RUNNING|gpu:1|first-line-of-a-name\\nnext-line-of-a-name\\n8|PENDING|N/A|b|c\\n'",
    }
    for name, body in fakes.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    out = tmp_path / "cluster.json"
    subprocess.run(
        [sys.executable, str(STATUS_WRITER_SOURCE), "t", str(out), "5", "--once"],
        env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"},
        check=True,
        timeout=60,
    )
    snapshot = json.loads(out.read_text())
    assert "error" not in snapshot, snapshot
    jobs = [(job["id"], job["name"]) for job in snapshot["jobs"]["list"]]
    assert jobs == [("7", "first-line-of-a-name"), ("8", "b|c")]
    assert (snapshot["jobs"]["running"], snapshot["jobs"]["pending"]) == (1, 1)
