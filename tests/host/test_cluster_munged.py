"""The cluster's munged on the host (components/files/lib/daemons.sh cluster_munged_up): kept
when nothing changed, restarted when a new key was installed after it started (a stack
applied afresh to a running cluster over SSH brings a new generated key)."""

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from components.common.transport import INTERPRETER, script

pytestmark = pytest.mark.privileged


def up(tmp_path: Path) -> str:
    """cluster_munged_up on the test's key, socket and state directory; the munged's pid."""
    caller = tmp_path / "munged_up.sh"
    caller.write_text('cluster_munged_up "$1/munge.key" "$1/run/munge.socket" "$1/state"\n')
    done = subprocess.run([*INTERPRETER, script(caller), "munged_up.sh", str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return (tmp_path / "state" / "munged.pid").read_text().strip()


def new_key(tmp_path: Path) -> None:
    key = tmp_path / "munge.key"
    fresh = tmp_path / "munge.key.new"
    fresh.write_bytes(os.urandom(1024))
    fresh.chmod(0o400)
    fresh.replace(key)


def test_a_new_key_restarts_the_cluster_s_munged_and_an_unchanged_one_does_not():
    assert shutil.which("munged"), "munge is missing: run `bash .ci/run`"
    # munged wants every directory above its socket searchable by all, and pytest's are 0700.
    tmp_path = Path(tempfile.mkdtemp(prefix="gpucluster-munged-", dir="/run"))
    tmp_path.chmod(0o755)
    new_key(tmp_path)
    pids = []
    try:
        pids.append(up(tmp_path))
        pids.append(up(tmp_path))
        assert pids[1] == pids[0], "munged restarted although its key did not change"
        time.sleep(0.05)  # the new key's mtime after the running munged's pid file
        new_key(tmp_path)
        pids.append(up(tmp_path))
        assert pids[2] != pids[0], "munged kept serving the old key"
        assert not Path(f"/proc/{pids[0]}").exists()
        socket = tmp_path / "run" / "munge.socket"
        credential = subprocess.run(["munge", "-S", str(socket), "-n"], capture_output=True, check=True).stdout
        subprocess.run(["unmunge", "-S", str(socket)], input=credential, capture_output=True, check=True)
    finally:
        for pid in set(pids):
            subprocess.run(["kill", pid], capture_output=True)
        time.sleep(0.2)
        shutil.rmtree(tmp_path, ignore_errors=True)
