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


def problems(
    tmp_path: Path,
    running: str | None,
    new: str,
    jobs: str | None = None,
    accounting: bool = False,
    storage: str | None = None,
):
    """`accounting`: this host holds the database's data; `storage`: the cluster keeps
    accounting (ACCOUNTING, every host) and the running controller's AccountingStorageType
    ("down": scontrol gets no answer)."""
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
    if storage is not None:
        body = f"printf 'AccountingStorageType   = accounting_storage/{storage}\\n'" if storage != "down" else "exit 1"
        (cluster_dir / "bin" / "scontrol").write_text(f"#!/bin/sh\n[ \"$*\" = 'show config' ] || exit 2\n{body}\n")
        (cluster_dir / "bin" / "scontrol").chmod(0o755)
    data = tmp_path / "mysql"
    if accounting:
        data.mkdir()
        (data / "ibdata1").write_text("")
    caller = tmp_path / "check.sh"
    caller.write_text('image_release_problems t-image "$1"\n')
    env = {"PATH": "/usr/bin:/bin", "LXC_PATH": str(lxc), "CLUSTER_DIR": str(cluster_dir)}
    if accounting:
        env["ACCOUNTING_DATA"] = str(data)
    if storage is not None:
        env["ACCOUNTING"] = "yes"
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


def test_every_host_of_a_cluster_with_accounting_refuses_alike(tmp_path):
    """A host without the database asks the running controller: it keeps accounting in slurmdbd."""
    (line,) = problems(tmp_path, "12", "13", "", storage="slurmdbd")
    assert "cannot convert the accounting database of Debian 12's (the running slurmctld keeps it" in line


@pytest.mark.parametrize("storage", ["none", "down"])
def test_accounting_added_with_the_release_change_passes_where_the_controller_keeps_none(tmp_path, storage):
    """The database is new (made on the new release): nothing to convert. A controller that does
    not answer is refused by the queue's check, on every host alike."""
    found = problems(tmp_path, "12", "13", "" if storage == "none" else "down", storage=storage)
    assert not any("accounting database" in line for line in found), found
    assert len(found) == (storage == "down")


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
    assert env["ACCOUNTING"] == "yes"
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


# The head of a job_state slurmctld 22.05.8 wrote (Debian 12's) after jobs 1 to 5: its sequence
# is 6. Given FirstJobId=7, that slurmctld started without state numbered its next job 7.
SLURM_2205_JOB_STATE = bytes.fromhex(
    "0000001150524f544f434f4c5f56455253494f4e002600000000006b0a2e9300000006000000000000000000000000fffffffefffffffe"
)


def restore_into(tmp_path: Path, job_state: bytes, now: str, kept: str | None = None):
    """restore_ct_slurmctld with a saved job_state of 22.05, then slurm.conf as slurmctld reads it."""
    saved = tmp_path / "slurmctld"
    saved.mkdir()
    (saved / "job_state").write_bytes(job_state)
    if kept is not None:
        (tmp_path / "accounting").mkdir()
        (tmp_path / "accounting" / "first-job-id").write_text(kept)
    caller = tmp_path / "restore.sh"
    caller.write_text(RESTORE_FAKES + "restore_ct_slurmctld t-c000\nslurm_conf_text\n")
    env = {"PATH": "/usr/bin:/bin", "CLUSTER_DIR": str(tmp_path), "NEW_SLURM": now, "CALLS": str(tmp_path / "calls"),
           "SLURM_CONF_TEXT": "ClusterName=t\n"}  # fmt: skip
    done = subprocess.run([*INTERPRETER, script(caller)], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert not saved.exists()
    return done


def test_job_ids_go_on_after_a_state_the_new_slurm_cannot_read(tmp_path):
    done = restore_into(tmp_path, SLURM_2205_JOB_STATE, "24.11.5")
    assert done.stdout == "ClusterName=t\nFirstJobId=7\n"
    assert "numbers its jobs from 7" in done.stderr


def test_a_state_the_same_slurm_reads_carries_its_own_job_ids(tmp_path):
    done = restore_into(tmp_path, SLURM_2205_JOB_STATE, "22.05.8")
    assert done.stdout == "ClusterName=t\n"
    assert not (tmp_path / "accounting").exists()


def test_a_larger_first_job_id_kept_stays(tmp_path):
    done = restore_into(tmp_path, SLURM_2205_JOB_STATE, "24.11.5", kept="5001\n")
    assert done.stdout == "ClusterName=t\nFirstJobId=5001\n"


@pytest.mark.parametrize("job_state", [b"", b"\x00\x00\x00\x11PROTOCOL_VERSION\x00\x26", b"garbage" * 10])
def test_a_job_state_that_cannot_be_read_says_so_and_starts_again(tmp_path, job_state):
    done = restore_into(tmp_path, job_state, "24.11.5")
    assert done.stdout == "ClusterName=t\n"
    assert "last job id cannot be read: job ids start again at 1" in done.stderr


def test_every_hosts_preflight_checks_the_clusters_accounting():
    """Only the database's host sees the data: every host's preflight learns that the cluster
    keeps accounting, and asks the running controller (so none lets its image be replaced,
    and with it its nodes torn down, while another host refuses)."""
    from tests.test_hosts import SECRETS

    def environments(config: dict) -> tuple[dict, dict]:
        run = run_program(config, stack="twohost", secrets=SECRETS)
        local = run.by_name("duo-gpu1-host-preflight").inputs["environment"]
        remote = run.by_name("duo-gpu2-host-preflight").inputs["environment"]  # over SSH: prefixed
        return local, {name.removeprefix("GPUCLUSTER_"): value for name, value in remote.items()}

    config = stack_config("twohost")
    config["cluster"]["image"] = {"release": "trixie"}
    config["cluster"]["accounting"] = {"nat_address": "10.46.3.20"}  # on gpu1
    first, second = environments(config)
    assert first["ACCOUNTING_DATA"] == "/var/lib/gpucluster/duo/accounting/mysql"
    assert "ACCOUNTING_DATA" not in second
    assert first["ACCOUNTING"] == second["ACCOUNTING"] == "yes"
    del config["cluster"]["accounting"]
    assert not any("ACCOUNTING" in environment for environment in environments(config))
