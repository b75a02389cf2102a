"""A node image of another Debian release brings another Slurm, which cannot read the running
one's queue or accounting database (components/files/lib/image_release.sh, the preflight's
check): refused with the reason and what to do, before anything changes; let through on an
empty queue without accounting, where the new slurmctld starts without the old state
(lib/slurm.sh restore_ct_slurmctld)."""

import subprocess
from pathlib import Path

import pytest

from components.common.transport import INTERPRETER, script
from tests.harness.program_harness import run_program, stack_config


def problems(tmp_path: Path, running: str | None, new: str, jobs: str | None = None, accounting: bool = False):
    lxc = tmp_path / "lxc"
    if running is not None:
        (lxc / "t-image" / "rootfs" / "etc").mkdir(parents=True)
        (lxc / "t-image" / "rootfs" / "etc" / "debian_version").write_text(f"{running}.9\n")
    cluster_dir = tmp_path / "cluster"
    (cluster_dir / "bin").mkdir(parents=True)
    if jobs is not None:  # the host's Slurm client: squeue's answer, or none (slurmctld down)
        body = f"printf '{jobs}'" if jobs != "down" else "exit 1"
        (cluster_dir / "bin" / "squeue").write_text(f"#!/bin/sh\n{body}\n")
        (cluster_dir / "bin" / "squeue").chmod(0o755)
    data = tmp_path / "mysql"
    if accounting:
        data.mkdir()
        (data / "ibdata1").write_text("")
    caller = tmp_path / "check.sh"
    caller.write_text('image_release_problems t-image "$1"\n')
    env = {"PATH": "/usr/bin:/bin", "LXC_PATH": str(lxc), "CLUSTER_DIR": str(cluster_dir)}
    if accounting:
        env["ACCOUNTING_DATA"] = str(data)
    done = subprocess.run([*INTERPRETER, script(caller), "check.sh", new], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


@pytest.mark.parametrize(("running", "jobs"), [(None, None), ("13", "7\n"), ("12", ""), ("12", None)])
def test_no_cluster_the_same_release_or_an_empty_queue_pass(tmp_path, running, jobs):
    assert problems(tmp_path, running, "13", jobs) == []


def test_a_queue_is_refused_with_what_to_do(tmp_path):
    (line,) = problems(tmp_path, "12", "13", "41\n42\n")
    assert "cannot take over the queue of Debian 12's (2 job(s)" in line
    assert "scontrol update nodename=ALL state=drain" in line


def test_a_controller_that_does_not_answer_is_refused(tmp_path):
    (line,) = problems(tmp_path, "12", "13", "down")
    assert "(an unknown number of job(s) queued or running, or slurmctld did not answer)" in line


def test_an_accounting_database_is_refused(tmp_path):
    (line,) = problems(tmp_path, "12", "13", "", accounting=True)
    assert "cannot convert the accounting database of Debian 12's" in line


def test_back_to_an_older_release_is_refused(tmp_path):
    (line,) = problems(tmp_path, "13", "12", "")
    assert "Debian 12's older Slurm cannot read its state" in line


def test_the_preflight_knows_the_images_release_and_the_database():
    config = stack_config("e2e")
    config["cluster"]["image"] = {"release": "trixie"}
    config["cluster"]["accounting"] = {"nat_address": "10.43.3.20"}
    run = run_program(config, stack="e2e")
    env = run.by_name("e2e-host-preflight").inputs["environment"]
    assert env["IMAGE_DEBIAN"] == "13"
    assert env["ACCOUNTING_DATA"] == "/var/lib/gpucluster/e2e/accounting/mysql"
    assert "image_release_problems" in run.by_name("e2e-host-preflight").inputs["create"]


RESTORE_FAKES = """
in_ct() {
  shift
  case "$*" in
    "slurmctld -V") echo "slurm-wlm $NEW_SLURM" ;;
    "test -e /var/lib/slurm/slurmctld/job_state") return 1 ;;
    *) cat > /dev/null; echo "restored" >> "$CALLS" ;;
  esac
}
"""


@pytest.mark.parametrize(("wrote", "now", "restored"), [(None, "22.05.8", True), (None, "24.11.5", False),
                                                        ("24.11", "24.11.5", True)])  # fmt: skip
def test_the_saved_queue_is_restored_only_into_the_slurm_that_wrote_it(tmp_path, wrote, now, restored):
    saved = tmp_path / "slurmctld"
    saved.mkdir()
    (saved / "job_state").write_text("")
    if wrote:
        (saved / ".gpucluster-slurm-release").write_text(f"{wrote}\n")
    calls = tmp_path / "calls"
    caller = tmp_path / "restore.sh"
    caller.write_text(RESTORE_FAKES + "restore_ct_slurmctld t-c000\n")
    env = {"PATH": "/usr/bin:/bin", "CLUSTER_DIR": str(tmp_path), "NEW_SLURM": now, "CALLS": str(calls)}
    done = subprocess.run([*INTERPRETER, script(caller)], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert calls.exists() == restored
    assert not saved.exists()  # taken into the container, or dropped
    assert ("starts without it" in done.stderr) == (not restored)
