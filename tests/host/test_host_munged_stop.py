"""The cluster's munged an earlier release ran on the host is stopped when the host's Slurm client
moves into the cluster's container (components/files/lib/slurm_client.sh stop_host_munged), and
never a process that only holds its old pid."""

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from components.common.transport import INTERPRETER, script

pytestmark = pytest.mark.privileged


def stop(cluster_dir: Path, run_dir: Path) -> subprocess.CompletedProcess:
    caller = cluster_dir / "stop.sh"
    caller.write_text("stop_host_munged\n")
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "CLUSTER_DIR": str(cluster_dir), "HOST_MUNGE_DIR": str(run_dir)}
    return subprocess.run([*INTERPRETER, script(caller)], capture_output=True, text=True, env=env, timeout=60)


def test_an_earlier_releases_munged_is_stopped_and_its_files_removed():
    assert shutil.which("munged"), "munge is missing: run `bash .ci/run`"
    # munged wants every directory above its socket searchable by all, and pytest's are 0700.
    base = Path(tempfile.mkdtemp(prefix="gpucluster-munged-", dir="/run"))
    base.chmod(0o755)
    cluster_dir, run_dir = base / "cluster", base / "run"
    state = cluster_dir / "munge"
    state.mkdir(parents=True)
    run_dir.mkdir()
    key = cluster_dir / "munge.key"
    key.write_bytes(b"k" * 1024)
    key.chmod(0o400)
    try:
        # As an earlier release started it (lib/daemons.sh cluster_munged_up).
        subprocess.run(
            ["munged", f"--socket={run_dir}/munge.socket", f"--key-file={key}", f"--pid-file={state}/munged.pid",
             f"--seed-file={state}/munged.seed", f"--log-file={state}/munged.log"],
            check=True, timeout=30,
        )  # fmt: skip
        pid = int((state / "munged.pid").read_text())
        assert Path(f"/proc/{pid}").exists()
        done = stop(cluster_dir, run_dir)
        assert done.returncode == 0, done.stderr
        time.sleep(0.2)
        assert not Path(f"/proc/{pid}").exists(), "the earlier release's munged still runs"
        assert not state.exists() and not run_dir.exists()
        # Run again (nothing left) it succeeds; a pid file naming another process kills nothing.
        assert stop(cluster_dir, run_dir).returncode == 0
        other = subprocess.Popen(["sleep", "60"])
        state.mkdir()
        (state / "munged.pid").write_text(f"{other.pid}\n")
        assert stop(cluster_dir, run_dir).returncode == 0
        assert other.poll() is None, "a process that is not the cluster's munged was stopped"
        other.kill()
    finally:
        subprocess.run(["pkill", "-f", f"--pid-file={state}/munged.pid"], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)
