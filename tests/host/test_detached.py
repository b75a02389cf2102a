"""`detached` (components/files/lib/core.sh): every long-lived process the scripts start on a
host (its daemons, the LXC monitors) belongs to no deploy. A CI runner kills, when a job ends,
every process whose environment holds the job's RUNNER_TRACKING_ID, and the deploy's
environment holds its secrets: the started process gets neither, and a session of its own."""

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from components.common.transport import INTERPRETER, helpers

pytestmark = pytest.mark.privileged  # starts (short-lived) daemons of its own

DEPLOY = {
    "RUNNER_TRACKING_ID": "github_detached-test",
    "PULUMI_CONFIG_PASSPHRASE": "the deploy's passphrase",
    "AWS_SECRET_ACCESS_KEY": "the deploy role's key",
}

# A deploy's script: a daemon that stays in the foreground (started in the background, its pid
# kept), one that forks as munged and lxc-start -d do, and a failing program, whose status the
# foreground call returns. Then it keeps running, as `pulumi up` still does.
CALLER = """
detached --background "$1/background.pid" "$1/background.log" SLURM_CONF=/etc/the-conf sleep 3001
detached /bin/sh -c 'sleep 3002 </dev/null >/dev/null 2>&1 & echo $! > "$0/forked.pid"' "$1"
detached false || echo "$?" > "$1/false.status"
touch "$1/started"
sleep 60
"""


def environ(pid: int) -> dict[str, str]:
    pairs = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(pair.decode().split("=", 1) for pair in pairs if pair)


def session_and_group(pid: int) -> tuple[int, int]:
    return os.getsid(pid), os.getpgid(pid)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_a_detached_process_holds_nothing_of_the_deploy_and_outlives_its_process_group(tmp_path):
    caller = subprocess.Popen(
        [*INTERPRETER, helpers() + CALLER, "caller", str(tmp_path)],
        env={"PATH": os.environ["PATH"], **DEPLOY},
        start_new_session=True,  # the deploy's process group, killed below
    )
    pids: list[int] = []
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "started").exists():
            assert caller.poll() is None, "the caller failed"
            assert time.monotonic() < deadline, "the caller did not start its daemons"
            time.sleep(0.1)
        pids = [int((tmp_path / f"{name}.pid").read_text()) for name in ("background", "forked")]
        background = pids[0]
        arguments = Path(f"/proc/{background}/cmdline").read_bytes().split(b"\0")[1:]
        assert arguments == [b"3001", b""], "not the program's pid"
        assert (tmp_path / "false.status").read_text().strip() == "1"
        for pid in pids:
            seen = environ(pid)
            assert not set(DEPLOY) & set(seen), (pid, seen)
            assert seen["PATH"] == "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
            assert session_and_group(pid)[0] != os.getsid(caller.pid)
            assert session_and_group(pid)[1] != os.getpgid(caller.pid)
        assert environ(background)["SLURM_CONF"] == "/etc/the-conf"
        # The runner's cleanup: the job's process group, and every process holding its id.
        os.killpg(caller.pid, signal.SIGKILL)
        caller.wait(timeout=10)
        marked = f"RUNNER_TRACKING_ID={DEPLOY['RUNNER_TRACKING_ID']}".encode()
        for entry in Path("/proc").iterdir():
            try:
                if entry.name.isdigit() and marked in (entry / "environ").read_bytes().split(b"\0"):
                    os.kill(int(entry.name), signal.SIGKILL)
            except (FileNotFoundError, ProcessLookupError, PermissionError):
                pass
        time.sleep(0.3)
        assert [alive(pid) for pid in pids] == [True, True]
    finally:
        if caller.poll() is None:
            os.killpg(caller.pid, signal.SIGKILL)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
