"""The README's main commands as a new user runs them, on a copy of the project: `./up.sh` (no
stack: this machine has no NVIDIA driver, so `nogpu`) brings the cluster up through the real
engine, Slurm answers, a second `./up.sh` changes nothing, `./down.sh nogpu --yes` takes it
down and the host is as before. The first `./up.sh` runs in a CI deploy's environment (the
runner's RUNNER_TRACKING_ID, the deploy's secrets): no process it leaves holds any of it, and
the cluster still serves jobs after every such process was killed, as the runner does when a
job ends (docs/previews.md). Its node image is copied from the one the other e2e tests kept
(or built), and purged at the end.
"""

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
import yaml

from components.lxc.node_image import third_party
from tests.harness.engine import ready
from tests.harness.program_harness import ROOT
from tests.harness.slurm_client import cluster_slurm
from tests.test_e2e import host_snapshot, leftovers, require_host, sh

pytestmark = [pytest.mark.e2e, pytest.mark.engine]

CLUSTER = "nogpu"
COPIED = ["up.sh", "down.sh", "pulumi.sh", "verify.sh", "purge-kept.sh", "tools", "Pulumi.yaml", "__main__.py"]
COPIED += ["components", "stacks", "requirements.txt", "requirements.lock", "ops", "review"]
# The sample comment of a pull request's preview against a real state (docs/previews.md): what
# review.preview wrote for a change adding node c004 to the running nogpu cluster. Its counts,
# table and labels are compared; GPUCLUSTER_WRITE_SAMPLE=1 rewrites the file from this run.
ENGINE_SAMPLE = ROOT / "docs" / "review-comment-sample-engine.md"
SAMPLE_INTRO = """# A sample review comment from the real engine

Written by `tests/test_e2e_up.py` (`GPUCLUSTER_WRITE_SAMPLE=1 ./test.sh tests/test_e2e_up.py`;
the test checks it is current): `python -m review.preview nogpu` through the real engine, against
the state of a `nogpu` cluster that `./up.sh` brought up, for a pull request adding node `c004`
to `stacks/Pulumi.nogpu.yaml`. A same-repository pull request gets this comment (with, as in
[the offline sample](review-comment-sample.md), the offline render's diff of the generated
files between the table and the preview).

"""
PREVIEW_DETAILS = "<details><summary>pulumi preview --diff"
PASSPHRASE = f"the test's own {os.getpid()}"
# What a CI deploy's `pulumi up` has in its environment besides the passphrase: the self-hosted
# runner's id for the job's processes, and the deploy role's keys.
DEPLOY_ENV = {"RUNNER_TRACKING_ID": f"github_e2e-up-{os.getpid()}", "AWS_SECRET_ACCESS_KEY": "the deploy role's key"}


def run(project: Path, command: str, timeout: int = 900, extra: dict | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run(
        ["bash", "-c", command],
        cwd=project,
        env={"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LC_ALL": "C"}
        | {"PULUMI_CONFIG_PASSPHRASE": PASSPHRASE, "NVIDIA_DRIVER_PROC": "/nonexistent/driver/nvidia"}
        | (extra or {}),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return done


def test_up_without_a_stack_brings_nogpu_up_through_the_engine_and_down_takes_it_away(tmp_path, capsys):
    missing = ready()
    assert missing is None, f"the real engine cannot run here: {missing}"
    require_host()
    taken = [p for p in (Path("/var/lib/gpucluster") / CLUSTER, Path("/var/lib/lxc") / f"{CLUSTER}-c000") if p.exists()]
    assert not taken, f"a {CLUSTER} cluster is already on this host ({taken}): ./down.sh {CLUSTER} --yes first"
    project = tmp_path / "project"
    project.mkdir()
    for name in COPIED:
        source = ROOT / name
        (shutil.copytree if source.is_dir() else shutil.copy2)(source, project / name)
    (project / "venv").symlink_to(ROOT / "venv")
    # A checkout has shared/ beside it: the node image's Enroot and Pyxis sources (third_party).
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "third_party").symlink_to(third_party())
    before = host_snapshot()
    report = []
    try:
        up = run(project, "./up.sh --yes", extra=DEPLOY_ENV)
        assert up.returncode == 0, up.stdout[-4000:] + up.stderr[-4000:]
        assert "no NVIDIA driver here" in up.stderr and "bringing up the GPU-less stack nogpu" in up.stderr
        assert "Resources:\n    + 50 created" in up.stdout, up.stdout[-2000:]
        report.append("$ ./up.sh --yes\n" + "\n".join(up.stdout.splitlines()[-4:]))
        report.append(registering_frames_only(project / ".pulumi-state/.pulumi/stacks/gpu-cluster/nogpu.json"))
        # The runner's cleanup after the job: what holds the deploy's environment is killed
        # (none should), and the cluster serves the jobs below after it.
        holding = deploy_environment_holders()
        for pid in holding:
            os.kill(pid, signal.SIGKILL)
        assert holding == {}, f"processes left holding the deploy's environment (now killed): {holding}"
        report.append("after it: no process holds the deploy's RUNNER_TRACKING_ID, passphrase or AWS key")
        env = cluster_slurm(f"/var/lib/gpucluster/{CLUSTER}")
        sinfo = sh("sinfo", "-h", "-o", "%P %a %D %t %N", env=env).stdout.strip()
        assert sinfo == "tutorial* up 4 idle c[000-003]", sinfo
        report.append(f"$ sinfo\n{sinfo}")
        gpus = sh(
            "srun", "-N4", "--gres=gpu:1", "--chdir=/tmp", "sh", "-c", "echo $(hostname) $CUDA_VISIBLE_DEVICES", env=env
        )
        assert sorted(gpus.stdout.split("\n")[:-1]) == [f"c00{i} 0" for i in range(4)], gpus.stdout
        # One CPU a node, dealt in turn: each job runs on its node's own CPU, whichever it is.
        status = "grep Cpus_allowed_list /proc/self/status | cut -f2"
        cpus = sh("srun", "-N4", "-c1", "--chdir=/tmp", "sh", "-c", f"echo $(hostname) $({status})", env=env)
        dealt = {f"c00{i}": sh("lxc-cgroup", "-n", f"{CLUSTER}-c00{i}", "cpuset.cpus").stdout.strip() for i in range(4)}
        assert dict(line.split() for line in cpus.stdout.splitlines()) == dealt, (cpus.stdout, dealt)
        report.append(f"one-CPU jobs' Cpus_allowed_list per node: {dealt}")
        again = run(project, "./up.sh nogpu --yes --expect-no-changes")
        assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
        assert "50 unchanged" in again.stdout, again.stdout[-2000:]
        report.append(preview_of_a_new_node(project))
        down = run(project, "./down.sh nogpu --yes")
        assert down.returncode == 0, down.stdout[-3000:] + down.stderr[-3000:]
        assert "Resources:\n    - 50 deleted" in down.stdout, down.stdout[-2000:]
        report.append("$ ./down.sh nogpu --yes\n" + "\n".join(down.stdout.splitlines()[-6:-3]))
    finally:
        if (project / ".pulumi-state").exists():
            run(project, "./down.sh nogpu --yes")
        run(project, f"./purge-kept.sh {CLUSTER}")
    assert not leftovers(CLUSTER), leftovers(CLUSTER)
    assert host_snapshot() == before
    with capsys.disabled():
        print("\n" + "\n".join(report))


def registering_frames_only(state_file: Path) -> str:
    """The state keeps, for each resource, the one frame of the program that made it
    (components/common/registration.py), and its source position is that frame."""
    resources = json.loads(state_file.read_text())["checkpoint"]["latest"]["resources"]
    made = [r for r in resources if not r["type"].startswith(("pulumi:pulumi:Stack", "pulumi:providers:"))]
    assert made, "no resource in the state"
    for resource in made:
        frames = [frame.get("sourcePosition") for frame in resource.get("stackTrace", [])]
        assert frames == [resource.get("sourcePosition")], (resource["urn"], frames)
    size = state_file.stat().st_size
    return f"the state: {size} bytes, {len(resources)} resources, one stack frame each"


def deploy_environment_holders() -> dict[int, str]:
    """Processes outside this test's own tree whose environment holds a value of the deploy's
    (DEPLOY_ENV, the passphrase), with their command lines."""
    deploy = {**DEPLOY_ENV, "PULUMI_CONFIG_PASSPHRASE": PASSPHRASE}
    marks = {f"{name}={value}".encode() for name, value in deploy.items()}
    parents, found = {}, {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if marks & set((entry / "environ").read_bytes().split(b"\0")):
                found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (FileNotFoundError, ProcessLookupError, PermissionError):  # gone, or a sandbox's init
            continue
    ours = {os.getpid()}
    while grown := {pid for pid, parent in parents.items() if parent in ours} - ours:
        ours |= grown
    return {pid: command for pid, command in found.items() if pid not in ours}


def preview_of_a_new_node(project: Path) -> str:
    """review.preview of a change adding node c004, against the running cluster's state; the
    stack file is put back afterwards."""
    stack_file = project / "stacks" / f"Pulumi.{CLUSTER}.yaml"
    original = stack_file.read_text()
    document = yaml.safe_load(original)
    cluster = document["config"]["gpu-cluster:cluster"]
    cluster["nodes"].append({"name": "c004", "nat_address": "10.48.3.6", "cluster_address": "10.48.5.5"})
    cluster["gpu"]["stand_in"]["count"] += 1
    stack_file.write_text(yaml.safe_dump(document, sort_keys=False))
    try:
        preview = run(
            project,
            'export PATH="$(tools/pulumi-cli.sh):$PATH" PULUMI_BACKEND_URL="file://$PWD/.pulumi-state" '
            f"PULUMI_SKIP_UPDATE_CHECK=true; venv/bin/python -m review.preview {CLUSTER} --out preview",
        )
    finally:
        stack_file.write_text(original)
    assert preview.returncode == 0, preview.stdout[-3000:] + preview.stderr[-3000:]
    comment = (project / "preview" / "comment.md").read_text()
    summary = comment.split(PREVIEW_DETAILS)[0]
    assert "| create | `nogpu-c004-lxc` |" in summary and "| create | `nogpu-c004-slurm-slurmd` |" in summary, summary
    assert "Running jobs die" not in summary and "| delete |" not in summary, summary
    assert PREVIEW_DETAILS in comment and "nogpu-c004-lxc" in comment.split(PREVIEW_DETAILS)[1]
    document = SAMPLE_INTRO + "````markdown\n" + comment.rstrip("\n") + "\n````\n"
    if os.environ.get("GPUCLUSTER_WRITE_SAMPLE") == "1":
        ENGINE_SAMPLE.write_text(document)
    written = ENGINE_SAMPLE.read_text() if ENGINE_SAMPLE.exists() else ""
    # The preview's own text lists steps in the order the engine ran them: only the part above
    # it (headline, table, labels) must be what this run shows.
    assert written.split(PREVIEW_DETAILS)[0] == document.split(PREVIEW_DETAILS)[0], (
        f"{ENGINE_SAMPLE.relative_to(ROOT)} is stale: GPUCLUSTER_WRITE_SAMPLE=1 ./test.sh tests/test_e2e_up.py"
    )
    return f"$ python -m review.preview {CLUSTER}   (node c004 added)\n" + summary.strip()
