"""The boot unit and the host-state description (components/host/boot_unit.py), and the
shell helpers the bring-up relies on: ip_forward's reference count, pid identity, the state
file read as data. Nothing here touches the host: ip_forward is exercised in a private
network namespace, processes are this test's own."""

import os
import shutil
import subprocess
import time

import pytest

from components.common.transport import INTERPRETER, helpers
from components.composition.host_state import render_host_state
from components.composition.stack_config import parse_stack_config
from components.host.boot_unit import render_boot_unit
from tests.harness.program_harness import run_program, stack_config

COMMAND = "command:local:Command"


def bash(text: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run `text` after the shared helpers, as every host script runs."""
    return subprocess.run(
        [*INTERPRETER, f"{helpers()}\n{text}", "test", *args],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": os.environ["PATH"], **(env or {})},
    )


@pytest.fixture(scope="module", params=["container", "host"])
def placement(request):
    return request.param


def e2e(placement: str):
    config = stack_config("e2e")
    if placement == "host":
        config["cluster"]["slurm"]["controller"] = {"placement": "host"}
    return config


def test_the_unit_passes_systemd_analyze_verify(tmp_path, placement):
    assert shutil.which("systemd-analyze"), "systemd-analyze is missing: run `bash .ci/run`"
    cluster = parse_stack_config(e2e(placement)).cluster
    unit = tmp_path / "gpucluster-e2e.service"
    unit.write_text(render_boot_unit(cluster))
    done = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, check=False)
    # verify exits 0 on many warnings: no output at all is the pass.
    assert (done.returncode, done.stdout + done.stderr) == (0, "")
    text = unit.read_text()
    assert "ExecStart=/bin/bash /var/lib/gpucluster/e2e/boot.sh /var/lib/gpucluster/e2e/host-state.env\n" in text
    assert "Before=lxc.service\n" in text and "WantedBy=multi-user.target\n" in text


def test_host_state_says_what_the_commands_make(placement):
    """The description the bring-up and verify read agrees with the commands' own inputs."""
    run = run_program(e2e(placement), stack="e2e")
    env = {r.name: r.inputs["environment"] for r in run.of_type(COMMAND)}
    state = dict(line.split("=", 1) for line in env["e2e-boot-unit"]["HOST_STATE_TEXT"].splitlines()[1:])
    forward = env["e2e-web-fwd-7000-rules"] if "e2e-web-fwd-7000-rules" in env else env["e2e-fwd-7000-rules"]
    assert state["FORWARDS"] == (
        f"{forward['TAG']},7000,{forward['TARGET_ADDRESS']},{forward['TARGET_PORT']},{forward['SOURCES']}"
    )
    assert forward["SOURCES"] == "10.44.0.0/30"
    assert (state["NAT_BRIDGE"], state["NAT_ADDRESS"]) == (env["e2e-bridges-nat"]["BRIDGE"], "10.43.3.1/24")
    assert state["CLUSTER_BRIDGE"] == env["e2e-bridges-cluster"]["BRIDGE"]
    client = env["e2e-slurm-client"]
    assert state["MUNGE_KEY_FILE"] == client["MUNGE_KEY_FILE"]
    assert "MUNGE_SOCKET" not in state and "SLURM_CONF_PATH" not in state  # no Slurm on the host
    slurmctld = env["e2e-slurm-slurmctld"]
    # slurmctld runs in a container either way: a node's, or its own (placement 'host').
    assert state["CONTROLLER_CONF"] == ""
    assert state["CONTROLLER_CONTAINER"] == slurmctld["CONTAINER"] == client["CONTAINER"]
    assert slurmctld["CONTAINER"] == ("e2e-slurmctld" if placement == "host" else "e2e-c000")
    containers = {e["CONTAINER"] for name, e in env.items() if name.endswith("-lxc")}
    listed = {*state["NODE_CONTAINERS"].split(), state["WEB_CONTAINER"], state["CONTROLLER_CONTAINER"]}
    assert listed == containers
    assert state["IMAGE"] == env["e2e-image-rootfs"]["IMAGE"]
    # What lives in memory and a reboot takes away: the stand-in GPUs and the snapshot writer.
    stand_ins = env["e2e-host-stand-in-gpus"]
    assert state["STAND_IN_GPUS"] == f"{stand_ins['DEVICE_DIR']},{stand_ins['GPU_COUNT']}"
    writer = env["e2e-web-status"]
    assert state["STATUS_WRITER"] == f"{writer['STATUS_DIR']},{writer['STATUS_INTERVAL_S']}"
    assert writer["CLUSTER_DIR"] == state["CLUSTER_DIR"] and "SLURM_CONF" not in writer


def test_the_boot_unit_is_written_last_and_deleted_first():
    run = run_program(e2e("container"), stack="e2e")
    boot = "e2e-boot-unit"
    for other in ("e2e-health", "e2e-web-service", "e2e-fwd-7000-rules", "e2e-c003-slurm-slurmd"):
        assert run.depends_on(boot, other), f"the boot unit does not wait for {other}"
    for command in run.of_type(COMMAND):
        assert command.name == boot or not run.depends_on(command.name, boot)
    assert run.outputs["verify_command"] == "./verify.sh e2e"
    assert (
        run.outputs["boot_command"]
        == "/bin/bash /var/lib/gpucluster/e2e/boot.sh /var/lib/gpucluster/e2e/host-state.env"
    )


@pytest.mark.privileged  # a network namespace of its own (unshare -n)
def test_ip_forward_is_restored_once_by_the_last_user_whatever_the_order(tmp_path):
    assert shutil.which("unshare"), "unshare (util-linux) is missing"
    steps = """
    IP_FORWARD_DIR=$STATE/ip_forward
    show() { printf '%s ' "$(cat /proc/sys/net/ipv4/ip_forward)"; }
    sysctl -qw net.ipv4.ip_forward=0
    show
    ip_forward_acquire a; show
    ip_forward_acquire b; show
    ip_forward_acquire a; show
    ip_forward_release a; show
    ip_forward_release a; show
    ip_forward_release b; show
    [ ! -e "$IP_FORWARD_DIR" ] && echo gone
    """
    # A private network namespace: its own net.ipv4.ip_forward, set to 0 first.
    done = subprocess.run(
        ["unshare", "-n", *INTERPRETER, f"{helpers()}\n{steps}"],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": os.environ["PATH"], "STATE": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "1", "1", "1", "1", "1", "0", "gone"]


@pytest.mark.privileged  # a network namespace of its own (unshare -n)
def test_ip_forward_recorded_by_a_cluster_of_the_last_release_is_the_one_restored(tmp_path):
    # The last release kept the host's value in $CLUSTER_DIR/ip_forward.orig and left
    # forwarding on: the upgraded cluster's bridge takes that record over.
    steps = """
    IP_FORWARD_DIR=$STATE/ip_forward CLUSTER_DIR=$STATE/cluster
    mkdir -p "$CLUSTER_DIR" && echo 0 > "$CLUSTER_DIR/ip_forward.orig"
    sysctl -qw net.ipv4.ip_forward=1
    ip_forward_acquire e2e; cat /proc/sys/net/ipv4/ip_forward
    ip_forward_release e2e; cat /proc/sys/net/ipv4/ip_forward
    [ ! -e "$CLUSTER_DIR/ip_forward.orig" ] && [ ! -e "$IP_FORWARD_DIR" ] && echo gone
    """
    done = subprocess.run(
        ["unshare", "-n", *INTERPRETER, f"{helpers()}\n{steps}"],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": os.environ["PATH"], "STATE": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "0", "gone"]


def test_a_pid_file_is_trusted_only_for_the_daemon_it_names(tmp_path):
    ours = subprocess.Popen(["sleep", "1001"])
    other = subprocess.Popen(["sleep", "1002"])
    try:
        time.sleep(0.2)
        pidfile = tmp_path / "daemon.pid"
        check = 'daemon_pid "$1" sleep 1001'
        pidfile.write_text(f"{ours.pid}\n")
        assert bash(check, str(pidfile)).stdout.strip() == str(ours.pid)
        # A reused pid: the same program with other arguments, another program, no process.
        pidfile.write_text(f"{other.pid}\n")
        assert bash(check, str(pidfile)).stdout == ""
        pidfile.write_text(f"{os.getpid()}\n")
        assert bash(check, str(pidfile)).stdout == ""
        pidfile.write_text("999999999\n")
        assert bash(check, str(pidfile)).stdout == ""
    finally:
        ours.kill()
        other.kill()


def test_the_host_state_file_is_read_as_data(tmp_path):
    marker = tmp_path / "ran"
    state = tmp_path / "host-state.env"
    state.write_text(f"# comment\nCLUSTER=e2e\nNAT_BRIDGE=$(touch {marker})\nnot a line\n")
    done = bash('load_host_state "$1"; printf "%s|%s" "$CLUSTER" "$NAT_BRIDGE"', str(state))
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"e2e|$(touch {marker})"
    assert not marker.exists()
    assert "host state file" in bash('load_host_state "$1"', str(tmp_path / "missing")).stderr


def test_the_rendered_state_names_each_key_once(placement):
    cluster = parse_stack_config(e2e(placement)).cluster
    keys = [line.split("=", 1)[0] for line in render_host_state(cluster).splitlines()[1:]]
    assert len(keys) == len(set(keys))
