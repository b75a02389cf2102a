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
from cluster_status import gres_count


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


def writer_pid(cluster_dir: Path) -> int | None:
    try:
        pid = int((cluster_dir / "cluster-status.pid").read_text())
    except FileNotFoundError:
        return None
    return pid if Path(f"/proc/{pid}").exists() else None


@pytest.fixture
def open_dir():
    """A directory others may enter (pytest's own are root's alone): the writer runs as nobody."""
    path = Path(tempfile.mkdtemp(prefix="gpucluster-status-test-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


def uid_of(pid: int) -> int:
    (line,) = [line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("Uid:")]
    return int(line.split()[1])


def test_the_writer_starts_once_restarts_on_change_and_is_removed(open_dir):
    tmp_path = open_dir
    cluster_dir = tmp_path / "cluster"
    (tmp_path / "slurm.conf").write_text("")
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
