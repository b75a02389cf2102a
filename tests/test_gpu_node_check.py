"""tools/gpu_node_check/check.sh on a machine without a GPU, its GPU and LXC steps stubbed: it
refuses to start when the stack's shared_dir exists, and removes only what it made (its
`mktemp -d` and the part of shared_dir's path it created). It runs as `nobody` (as root here)
in a temporary copy of the tool: nothing outside that copy can change."""

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.harness.program_harness import ROOT

STUBS = ("nvidia-smi", "unshare", "dpkg")


@pytest.fixture
def sandbox():
    top = Path(tempfile.mkdtemp(prefix="gpu-node-check-test."))
    try:
        repo = top / "repo"
        shutil.copytree(ROOT / "tools" / "gpu_node_check", repo / "tools" / "gpu_node_check")
        shutil.copytree(ROOT / "components" / "files" / "lib", repo / "components" / "files" / "lib")
        (top / "bin").mkdir()
        for name in STUBS:  # each records its arguments and the scratch directory it was given
            stub = top / "bin" / name
            stub.write_text(f'#!/bin/sh\necho "{name} $* SCRATCH=${{SCRATCH:-}}" >> {top}/calls\n')
            stub.chmod(0o755)
        (top / "tmp").mkdir()
        (top / "out").mkdir()
        for path in (top, *top.rglob("*")):
            path.chmod(0o777 if path.is_dir() else 0o755)
        yield top
    finally:
        shutil.rmtree(top, ignore_errors=True)


def commands(top: Path, shared: Path) -> None:
    """prepare.py's commands.json, with the stack's shared_dir at `shared` and no-op scripts."""
    work = top / "repo" / "tools" / "gpu_node_check" / "work"
    work.mkdir(exist_ok=True)
    command = {"create": "/bin/true", "interpreter": ["/bin/sh"], "environment": {"SHARED_DIR": str(shared)}}
    names = ("dev-host-preflight", "dev-c000-lxc", "dev-c001-lxc")
    (work / "commands.json").write_text(json.dumps({name: command for name in names}))
    os.chmod(work, 0o777)
    os.chmod(work / "commands.json", 0o644)


def check(top: Path) -> subprocess.CompletedProcess:
    drop = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"] if os.geteuid() == 0 else []
    env = {"PATH": f"{top}/bin:/usr/sbin:/usr/bin:/sbin:/bin", "OUT": f"{top}/out", "TMPDIR": f"{top}/tmp"}
    return subprocess.run(
        [*drop, "bash", "tools/gpu_node_check/check.sh"],
        cwd=top / "repo",
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_an_existing_shared_dir_is_refused_before_anything_runs(sandbox):
    shared = sandbox / "srv" / "gpucluster" / "dev" / "shared"
    shared.mkdir(parents=True)
    (shared / "a cluster's file").write_text("kept\n")
    commands(sandbox, shared)
    done = check(sandbox)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"error: {shared} exists already" in done.stderr
    assert (shared / "a cluster's file").read_text() == "kept\n"
    assert not (sandbox / "calls").exists(), "it ran steps after all"
    assert list((sandbox / "tmp").iterdir()) == []


def test_it_removes_what_it_made_and_nothing_else(sandbox):
    srv = sandbox / "srv"
    srv.mkdir()
    (srv / "other").write_text("kept\n")
    os.chmod(srv, 0o777)
    shared = srv / "gpucluster" / "dev" / "shared"
    commands(sandbox, shared)
    done = check(sandbox)
    assert done.returncode == 0, done.stdout + done.stderr
    calls = (sandbox / "calls").read_text().splitlines()
    # The GPU and LXC steps ran, the second part with the check's scratch directory.
    [part_two] = [c for c in calls if c.startswith("unshare ")]
    scratch = part_two.rsplit("SCRATCH=", 1)[1]
    assert Path(scratch).parent == sandbox / "tmp", part_two
    assert any(c.startswith("dpkg -x ") and f" {scratch}/lxc-install " in c for c in calls), calls
    # What it made is gone (its scratch directory, srv/gpucluster); what was there stays.
    assert sorted(p.name for p in srv.iterdir()) == ["other"]
    assert list((sandbox / "tmp").iterdir()) == []
    log = (sandbox / "out" / "log.txt").read_text()
    assert f"removing what this check made: {scratch} {srv / 'gpucluster'}" in log


def test_the_scripts_name_no_fixed_path_to_make_or_remove():
    """Everything the check makes lies under its scratch directory or the stack's shared_dir."""
    for name in ("check.sh", "in_namespace.sh", "common.sh"):
        text = (ROOT / "tools" / "gpu_node_check" / name).read_text()
        for fixed in ("/opt/lxc", "/var/lib/lxcdev", "/tmp/ct", "/tmp/lxcbin", "/srv/gpucluster"):
            assert fixed not in text, f"{name} names {fixed}"
