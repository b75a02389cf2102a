"""Job accounting under mocks and on this host: the graph's order, rendered settings accepted by
Slurm 22.05, what the accounts script is given, and the GPU health program against real
device nodes (stand-ins with NVIDIA's major), with Slurm's commands recorded."""

import os
import re
import subprocess
from pathlib import Path

import pytest

from components.composition.config import ClusterConfig
from components.slurm.accounting import account_lines
from components.slurm.slurm_conf import render_slurmdbd_conf
from tests.harness.e2e_teardown import STACK, accounting_config
from tests.harness.program_harness import run_program, slurm_conf_of, stack_config
from tests.slurm.test_slurm_conf import lines, slurm_parses

COMMAND = "command:local:Command"
HEALTH = Path(__file__).resolve().parents[2] / "components" / "slurm" / "files" / "gpu_health.sh"


@pytest.fixture(scope="module")
def run():
    return run_program(accounting_config(), stack=STACK)


def cluster_config(**kwargs) -> ClusterConfig:
    return ClusterConfig.model_validate(accounting_config(**kwargs)["cluster"])


@pytest.mark.parametrize(
    ("resource", "dependency"),
    [
        ("e2e-slurm-accounting-lxc", "e2e-slurm-accounting-data"),
        ("e2e-slurm-accounting-lxc", "e2e-bridges-nat"),
        ("e2e-slurm-accounting-users", "e2e-slurm-accounting-lxc"),
        ("e2e-slurm-accounting-database", "e2e-slurm-accounting-lxc"),
        ("e2e-slurm-accounting-slurmdbd", "e2e-slurm-accounting-database"),
        ("e2e-slurm-accounting-slurmdbd", "e2e-slurm-accounting-users"),
        ("e2e-slurm-accounting-slurmdbd", "e2e-slurm-munge-key"),
        ("e2e-slurm-accounting-slurmdbd", "e2e-slurm-client"),
        ("e2e-slurm-slurmctld", "e2e-slurm-accounting-slurmdbd"),
        ("e2e-accounts-apply", "e2e-slurm-slurmctld"),
        ("e2e-accounts-apply", "e2e-c000-users"),
        ("e2e-accounts-apply", "e2e-host-users"),
        ("e2e-c001-users", "e2e-c001-lxc"),
        ("e2e-host-users", "e2e-host-packages"),
        ("e2e-boot-unit", "e2e-accounts-apply"),
    ],
)
def test_accounting_order(run, resource, dependency):
    assert run.depends_on(resource, dependency)


def test_the_database_container_is_made_while_the_node_image_is_built(run):
    for independent in ("e2e-image-rootfs", "e2e-c000-lxc", "e2e-slurm-munge-key"):
        assert not run.depends_on("e2e-slurm-accounting-lxc", independent)


def test_what_lives_in_the_database_container_is_replaced_with_it(run):
    lxc = run.by_name("e2e-slurm-accounting-lxc")
    assert lxc.delete_before_replace and "mariadb-server" in lxc.inputs["triggers"]
    for name in ("users", "database", "slurmdbd"):
        assert run.by_name(f"e2e-slurm-accounting-{name}").replace_with == {lxc.urn}
    # The data directory is not: it outlives the container.
    assert not run.by_name("e2e-slurm-accounting-data").replace_with


def test_no_password_and_no_config_text_with_one_in_any_input(run):
    for command in run.of_type(COMMAND):
        for key, value in (command.inputs.get("environment") or {}).items():
            assert not re.search(r"(?m)^StoragePass=", str(value)), f"{command.name}.{key}"
            assert "IDENTIFIED BY" not in str(value), f"{command.name}.{key}"
    dbd = run.by_name("e2e-slurm-accounting-slurmdbd").inputs["environment"]
    assert dbd["PASSWORD_FILE"] == "/var/lib/gpucluster/e2e/accounting/db-password"


def test_people_are_made_on_the_host_and_in_every_container(run):
    specs = "alice:2101:2101:alice\nbob:2102:2102:bob\ncarol:2103:2103:carol"
    for name in ("e2e-host-users", "e2e-c000-users", "e2e-c001-users", "e2e-slurm-accounting-users"):
        assert run.by_name(name).inputs["environment"]["USERS"] == specs
    assert run.by_name("e2e-host-preflight").inputs["environment"]["USERS"] == specs


def test_nodes_get_the_health_program_and_their_devices(run):
    env = run.by_name("e2e-c001-slurm-slurmd").inputs["environment"]
    assert env["GPU_HEALTH_PROGRAM"] == HEALTH.read_text()
    assert env["GPU_HEALTH_DEVICES"] == "/run/gpucluster-e2e-dev/nvidia1 /dev/nvidia1"
    # What slurmd loads at start only, a restart when it changes (the gather among them).
    assert "JobAcctGatherType=jobacct_gather/linux" in env["SLURMD_START_PLUGINS"]


def test_without_accounting_nothing_of_it_is_built():
    run = run_program(stack_config("e2e"), stack=STACK)
    names = {r.name for r in run.resources}
    assert not {n for n in names if "accounting" in n or "accounts" in n or n.endswith("-users")}
    for command in run.of_type(COMMAND):
        env = command.inputs.get("environment") or {}
        assert not {"USERS", "GPU_HEALTH_PROGRAM", "DB_CONTAINER"} & set(env), command.name
        assert "DB_CONTAINER" not in env.get("HOST_STATE_TEXT", "")


def test_the_boot_unit_starts_the_database_container(run):
    assert "DB_CONTAINER=e2e-db\n" in run.by_name("e2e-boot-unit").inputs["environment"]["HOST_STATE_TEXT"]
    assert "e2e-db" in run.by_name("e2e-host-preflight").inputs["environment"]["CONTAINERS"].split()


def test_slurm_conf_records_gpus_enforces_limits_and_checks_health():
    body = lines(slurm_conf_of(cluster_config(), "c000"))
    for line in (
        "AccountingStorageType=accounting_storage/slurmdbd",
        "AccountingStorageHost=10.43.3.20",
        "AccountingStoragePort=6819",
        "AccountingStoragePass=/run/gpucluster-e2e/munge.socket",
        "AccountingStorageTRES=gres/gpu",
        "AccountingStorageEnforce=associations,limits,qos",
        "JobAcctGatherType=jobacct_gather/linux",
        "HealthCheckProgram=/usr/local/sbin/gpucluster-gpu-health",
        "HealthCheckInterval=10",
        "HealthCheckNodeState=ANY",
    ):
        assert line in body
    assert "AccountingStorageType=accounting_storage/none" not in body


def test_slurm_2205_accepts_the_accounting_settings(tmp_path):
    done = slurm_parses(slurm_conf_of(cluster_config(), "c000"), tmp_path)
    assert done.returncode == 0 and "error" not in done.stderr, done.stderr


def test_slurmdbd_conf_has_no_password():
    text = render_slurmdbd_conf(cluster_config())
    assert "StoragePass" not in text
    # In slurm.conf, AccountingStoragePass is munge's socket for slurmdbd, not a password.
    assert "AccountingStoragePass=/run/gpucluster-e2e/munge.socket" in lines(slurm_conf_of(cluster_config(), "c000"))
    assert lines(text) == [
        "DbdHost=db",
        "DbdPort=6819",
        "SlurmUser=slurm",
        "AuthType=auth/munge",
        "AuthInfo=socket=/run/gpucluster-e2e/munge.socket",
        "StorageType=accounting_storage/mysql",
        "StorageHost=localhost",
        "StorageUser=slurm",
        "StorageLoc=slurm_acct_db",
        "LogFile=/var/log/slurm/slurmdbd.log",
        "PidFile=/run/slurmdbd.pid",
    ]


def test_account_lines():
    assert account_lines(cluster_config().accounting) == {
        "QOS": "short 10 - 60",
        "ACCOUNTS": "physics 1 normal,short normal\nchem 2 - -",
        "MEMBERS": "alice physics\nbob chem\nalice chem",
    }
    assert account_lines(cluster_config(changed=True).accounting) == {
        "QOS": "short 20 1 1440",
        "ACCOUNTS": "physics 2 normal,short short\nbio 1 short -",
        "MEMBERS": "alice physics\ncarol bio\nbob bio",
    }


# ---- the GPU health program, on this host ----


@pytest.fixture
def node(tmp_path):
    """Stand-in GPUs (major 195) in a directory, the program's list of them, and recording
    sinfo/scontrol on PATH whose node state the test sets."""
    assert os.geteuid() == 0, "the health check test makes device nodes (mknod): run as root"
    devices = tmp_path / "dev"
    devices.mkdir()
    for minor in (0, 1):
        subprocess.run(["mknod", str(devices / f"nvidia{minor}"), "c", "195", str(minor)], check=True)
    conf = tmp_path / "gpu-health.conf"
    conf.write_text(f"{devices}/nvidia0 195:0\n{devices}/nvidia1 195:1\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    state = tmp_path / "state"
    state.write_text("idle|gpu:2|none\n")
    (bin_dir / "sinfo").write_text(f'#!/bin/sh\necho "sinfo $*" >> {calls}\ncat {state}\n')
    (bin_dir / "scontrol").write_text(f'#!/bin/sh\necho "scontrol $*" >> {calls}\n')
    for tool in ("sinfo", "scontrol"):
        (bin_dir / tool).chmod(0o755)

    def check() -> tuple[int, str, list[str]]:
        calls.unlink(missing_ok=True)
        done = subprocess.run(
            ["/bin/bash", str(HEALTH)],
            env={
                "PATH": f"{bin_dir}:/usr/bin:/bin",
                "GPU_HEALTH_CONF": str(conf),
                "GPU_HEALTH_NODE": "c001",
                "SLURM_CONF": "/nonexistent",
            },
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        updates = [c for c in (calls.read_text().splitlines() if calls.exists() else []) if "update" in c]
        return done.returncode, done.stderr, updates

    return devices, conf, state, check


@pytest.mark.privileged  # stand-in GPU device nodes (mknod)
def test_stand_in_gpus_pass(node):
    _, _, _, check = node
    assert check() == (0, "", [])


@pytest.mark.privileged  # stand-in GPU device nodes (mknod)
def test_a_missing_device_drains_the_node_once(node):
    devices, _, state, check = node
    (devices / "nvidia1").unlink()
    code, stderr, updates = check()
    reason = f"gpu-health: {devices}/nvidia1 missing"
    assert code == 1 and reason in stderr
    assert updates == [f"scontrol update NodeName=c001 State=DRAIN Reason={reason}"]
    state.write_text(f"drained|gpu:2|{reason}\n")
    assert check()[2] == [], "drained again with the same reason"


@pytest.mark.privileged  # stand-in GPU device nodes (mknod)
def test_a_device_with_other_numbers_or_a_wrong_gres_count_fails(node):
    devices, _, state, check = node
    (devices / "nvidia1").unlink()
    subprocess.run(["mknod", str(devices / "nvidia1"), "c", "195", "7"], check=True)
    state.write_text("idle|gpu:1|none\n")
    code, stderr, updates = check()
    assert code == 1
    assert f"{devices}/nvidia1 is 195:7, not 195:1" in stderr
    assert "Slurm counts 1 GPUs (Gres), the node has 2" in stderr
    assert len(updates) == 1 and "State=DRAIN" in updates[0]


@pytest.mark.privileged  # stand-in GPU device nodes (mknod)
def test_a_device_that_is_not_a_character_device_fails(node):
    devices, _, _, check = node
    (devices / "nvidia0").unlink()
    (devices / "nvidia0").write_text("")
    code, stderr, _ = check()
    assert code == 1 and f"{devices}/nvidia0 is not a character device" in stderr


@pytest.mark.privileged  # stand-in GPU device nodes (mknod)
def test_a_node_this_check_drained_is_resumed_when_healthy(node):
    _, _, state, check = node
    state.write_text("drained|gpu:2|gpu-health: /dev/nvidia1 missing\n")
    assert check() == (0, "c001: GPUs healthy again, resuming\n", ["scontrol update NodeName=c001 State=RESUME"])


@pytest.mark.privileged  # stand-in GPU device nodes (mknod)
def test_someone_elses_drain_is_left_alone(node):
    devices, _, state, check = node
    state.write_text("drained|gpu:2|maintenance by the admin\n")
    assert check()[2] == []
    (devices / "nvidia0").unlink()
    code, _, updates = check()
    assert code == 1 and updates == []
