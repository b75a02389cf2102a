"""The cluster snapshot writer (components/app/files/cluster_status.py) and the scripts that
start and stop it on the host; no cluster needed (a snapshot of an unreachable cluster carries
Slurm's error)."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from components.app.web_app import FILES, STATUS_WRITER_SOURCE
from components.transport import INTERPRETER, script

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


def test_the_writer_starts_once_restarts_on_change_and_is_removed(tmp_path):
    cluster_dir = tmp_path / "cluster"
    (tmp_path / "slurm.conf").write_text("")
    environment = {
        "CLUSTER": "t",
        "CLUSTER_DIR": str(cluster_dir),
        "STATUS_DIR": str(cluster_dir / "status"),
        "STATUS_INTERVAL_S": "1",
        "SLURM_CONF": str(tmp_path / "slurm.conf"),
        "STATUS_WRITER_SOURCE": STATUS_WRITER_SOURCE.read_text(),
    }

    def run(name: str, **changes) -> None:
        subprocess.run([*INTERPRETER, script(FILES / name)], env={**environment, **changes}, check=True, timeout=60)

    try:
        run("webapp_status_create.sh")
        first = writer_pid(cluster_dir)
        assert first and (cluster_dir / "status").is_dir()
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
