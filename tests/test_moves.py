"""Moves and renames in a running cluster, under mocks: what the engine runs, where, in what order.

The state holds a three-host stack (gpu1 local, gpu2 and gpu3 over SSH); the new program moves
things between the SSH hosts. The engine's order comes from tests/harness/command_executor.py
with every script replaced by a recorder, so nothing runs on this machine.
"""

import copy
import threading

import pytest

from tests.harness import command_executor
from tests.harness.command_executor import State, StateEntry, host_commands, up
from tests.harness.plan import plan, records
from tests.harness.program_harness import run_program, stack_config

SECRETS = {"gpu2SshKey": "-----BEGIN OPENSSH PRIVATE KEY-----\nnot-a-key\n-----END OPENSSH PRIVATE KEY-----\n"}
GPU2, GPU3 = "192.168.10.12", "192.168.10.13"


def three_hosts(controller: str = "c002") -> dict:
    """The two-host stack plus gpu3 (SSH) with node c004; slurmctld in `controller`."""
    config = copy.deepcopy(stack_config("twohost"))
    cluster = config["cluster"]
    gpu3 = copy.deepcopy(cluster["hosts"][1])
    gpu3["name"], gpu3["address"], gpu3["connection"]["address"] = "gpu3", GPU3, GPU3
    gpu3["network"] = {
        "nat_bridge": {"name": "duobr0", "address": "10.48.3.1/24"},
        "cluster_bridge": {"name": "duobr1", "subnet": "10.48.5.0/24"},
    }
    cluster["hosts"].append(gpu3)
    cluster["nodes"].append(
        {"name": "c004", "host": "gpu3", "nat_address": "10.48.3.2", "cluster_address": "10.48.5.2"}
    )
    cluster["slurm"]["controller"] = {"placement": "container", "node": controller}
    return config


def moved(config: dict) -> dict:
    """c003 moved from gpu2 to gpu3 (with addresses of gpu3's subnets), slurmctld from c002
    (gpu2) to c004 (gpu3)."""
    config = copy.deepcopy(config)
    c003 = next(node for node in config["cluster"]["nodes"] if node["name"] == "c003")
    c003.update(host="gpu3", nat_address="10.48.3.3", cluster_address="10.48.5.3")
    config["cluster"]["slurm"]["controller"]["node"] = "c004"
    return config


def commands(config: dict):
    return host_commands(run_program(config, stack="twohost", secrets=SECRETS))


@pytest.fixture
def recorded(monkeypatch):
    """Every script the engine would run, in the order it starts: (name, script, host)."""
    ran: list[tuple[str, str, str]] = []
    lock = threading.Lock()

    def record(command, script, previous, timeout):
        kind = "delete" if script == command.delete else "create"
        with lock:
            ran.append((command.name, kind, command.connection["host"] if command.connection else "local"))
        return "", ""

    monkeypatch.setattr(command_executor, "_execute", record)
    return ran


def test_a_move_between_ssh_hosts_deletes_on_the_old_host_before_it_creates_on_the_new(recorded):
    old = commands(three_hosts())
    state = State({c.urn: StateEntry(c) for c in old})
    _, actions = up(state, commands(moved(three_hosts())))

    for name in ("duo-c003-lxc", "duo-slurm-slurmctld"):
        assert actions[name] == "replace", (name, actions[name])
        steps = [(kind, host) for ran, kind, host in recorded if ran == name]
        assert steps == [("delete", GPU2), ("create", GPU3)], (name, steps)
    # slurmd is replaced with its container but is no delete-before-replace resource: as the
    # engine does it, its old copy is deleted at the end, on the old host, where its container
    # is already gone (the delete then has nothing to do).
    assert actions["duo-c003-slurm-slurmd"] == "replace"
    steps = [(kind, host) for ran, kind, host in recorded if ran == "duo-c003-slurm-slurmd"]
    assert steps == [("create", GPU3), ("delete", GPU2)], steps
    order = [(name, kind) for name, kind, _ in recorded]
    assert order.index(("duo-c003-lxc", "delete")) < order.index(("duo-c003-slurm-slurmd", "delete"))
    assert order.index(("duo-c003-lxc", "create")) < order.index(("duo-c003-slurm-slurmd", "create"))
    # Every host keeps its Slurm client: none is deleted, each converges in place where it is.
    clients = {name: action for name, action in actions.items() if name.endswith("-slurm-client")}
    assert clients == {f"duo-gpu{n}-slurm-client": "update" for n in (1, 2, 3)}
    assert not [step for step in recorded if step[0].endswith("-slurm-client") and step[1] == "delete"]
    # Afterwards the state holds one of each, on the new host.
    by_name = {entry.command.name: entry.command for entry in state.resources.values()}
    assert len(by_name) == len(state.resources)
    for name in ("duo-c003-lxc", "duo-c003-slurm-slurmd", "duo-slurm-slurmctld"):
        assert by_name[name].connection["host"] == GPU3


def test_the_upgrade_plan_of_a_move_replaces_what_moved():
    """The upgrade planner (tests/harness/plan.py) knows that a remote command's triggers replace."""
    old = records(run_program(three_hosts(), stack="twohost", secrets=SECRETS))
    new = records(run_program(moved(three_hosts()), stack="twohost", secrets=SECRETS))
    steps = {step.urn.rsplit("::", 1)[1]: step for step in plan(old, new)}
    assert steps["duo-c003-lxc"].action == "replace" and steps["duo-c003-lxc"].changed == ("triggers",)
    assert steps["duo-slurm-slurmctld"].action == "replace"
    assert not [name for name, step in steps.items() if step.action in ("create", "delete")]


def test_the_controller_hosts_client_of_an_earlier_release_is_kept_not_made_twice():
    """Earlier, the controller's host had its client under the controller (`duo-slurm-client`);
    now every host has `duo-<host>-slurm-client`. The alias takes the old one over: deleting it
    at the end would stop the munged and remove the slurm.conf that the new one just converged."""
    new = records(run_program(stack_config("twohost"), stack="twohost", secrets=SECRETS))
    (client,) = [r for r in new if r["name"] == "duo-gpu1-slurm-client"]
    (controller,) = [r for r in new if r["name"] == "duo-slurm"]
    head = "::".join(client["urn"].split("::")[:2])
    earlier = {
        **client,
        "name": "duo-slurm-client",
        "urn": f"{head}::gpu-cluster:slurm:SlurmController${client['type']}::duo-slurm-client",
        "parent": controller["urn"],
        "aliases": [],
    }
    old = [record for record in new if record is not client] + [earlier]
    steps = {step.urn.rsplit("::", 1)[1]: step for step in plan(old, new)}
    assert steps["duo-gpu1-slurm-client"].action == "same"
    assert steps["duo-gpu1-slurm-client"].old_urn.endswith("::duo-slurm-client")
    assert not [name for name, step in steps.items() if step.action != "same"]


def test_nothing_moves_where_the_host_stays():
    """The host's name is a trigger only of what the config places: a second plan of the same
    stack replaces nothing, and a one-host stack's commands carry no host trigger."""
    old = records(run_program(three_hosts(), stack="twohost", secrets=SECRETS))
    new = records(run_program(three_hosts(), stack="twohost", secrets=SECRETS))
    assert {step.action for step in plan(old, new)} == {"same"}
    local = records(run_program(stack_config("e2e"), stack="e2e"))
    assert not [r for r in local if any(str(t).startswith("host:") for t in r["inputs"].get("triggers") or [])]


# ---- renames on one host: the container scripts, with LXC's commands stubbed ----

LXC_STUB = """#!/bin/bash
# Records the call; lxc-info answers from $STUB/running; lxc-start/lxc-create stop the script.
# STUB is written in (lxc-start runs detached, with none of the script's environment).
tool=$(basename "$0"); name=""; args=("$@")
while [ $# -gt 0 ]; do [ "$1" = -n ] && name=$2; shift; done
echo "$tool $name ${args[*]}" >> "$STUB/calls"
case $tool in
  lxc-info) [ -f "$STUB/running/$name" ] && echo RUNNING || echo STOPPED ;;
  lxc-stop) rm -f "$STUB/running/$name" ;;
  lxc-destroy) rm -rf "$LXC_PATH/$name" ;;
  lxc-start|lxc-create) exit 1 ;;
esac
"""


def lxc_stubs(tmp_path):
    stub = tmp_path / "stub"
    (stub / "bin").mkdir(parents=True)
    (stub / "running").mkdir()
    for tool in ("lxc-info", "lxc-stop", "lxc-destroy", "lxc-start", "lxc-create", "lxc-copy", "lxc-attach"):
        (stub / "bin" / tool).write_text(LXC_STUB.replace("tool=", f"STUB={stub}\ntool=", 1))
        (stub / "bin" / tool).chmod(0o755)
    return stub


def container(lxc_path, name: str, cluster: str, conf: str = "", running_in=None) -> None:
    """A container of `cluster` as the scripts see it: its config, owner marker, our config."""
    directory = lxc_path / name
    directory.mkdir(parents=True)
    (directory / "config").write_text(f"lxc.include = {directory}/gpucluster.conf\n")
    (directory / "gpucluster-owner").write_text(cluster)
    (directory / "gpucluster.conf").write_text(conf)
    if running_in:
        (running_in / name).touch()


def run_script(path, stub, environment: dict):
    import os
    import subprocess

    from components.common.transport import INTERPRETER, script

    # The helpers set PATH: the stubs go first right after them.
    marker = f"# ---- {path.name} ----\n"
    text = script(path).replace(marker, f'{marker}PATH="$STUB/bin:$PATH"\n')
    return subprocess.run(
        [*INTERPRETER, text],
        env={"PATH": os.environ["PATH"], "STUB": str(stub), **environment},
        capture_output=True,
        text=True,
        check=False,
    )


def test_a_node_renamed_with_its_addresses_stops_the_old_names_container_before_starting(tmp_path):
    """c003 renamed c009, same addresses: the old container goes only at the end of the update
    (another resource), so c009's create stops it before starting on the same address."""
    from components.lxc.cuda_container import FILES as LXC_FILES

    stub, lxc_path = lxc_stubs(tmp_path), tmp_path / "lxc"
    lines = "lxc.net.0.ipv4.address = 10.98.3.5/24\nlxc.net.1.ipv4.address = 10.98.5.5/24\n"
    container(lxc_path, "rn-c003", "rn", f"lxc.uts.name = c003\n{lines}", running_in=stub / "running")
    container(lxc_path, "rn-c001", "rn", "lxc.net.0.ipv4.address = 10.98.3.3/24\n", running_in=stub / "running")
    container(lxc_path, "other-c009", "other", lines, running_in=stub / "running")  # not this cluster's
    container(lxc_path, "rn-c009", "rn")
    done = run_script(
        LXC_FILES / "container_create.sh",
        stub,
        {
            "LXC_PATH": str(lxc_path),
            "CLUSTER": "rn",
            "CLUSTER_DIR": str(tmp_path / "state"),
            "IMAGE": "rn-image",
            "CONTAINER": "rn-c009",
            "NODE_HOSTNAME": "c009",
            "LXC_CONFIG": f"lxc.uts.name = c009\n{lines}",
            "NAT_ADDRESS": "10.98.3.5",
            "DEVICES": "",
            "DRIVER_FILES": "",
            "SHARED_DIR": str(tmp_path / "shared"),
            "CPUSET": "",
        },
    )
    calls = (stub / "calls").read_text().splitlines()
    assert done.returncode != 0 and calls[-1].startswith("lxc-start rn-c009"), (done.stderr, calls)
    stops = [call.split()[1] for call in calls if call.startswith("lxc-stop")]
    assert stops == ["rn-c003"], calls
    assert not (stub / "running" / "rn-c003").exists()
    assert (stub / "running" / "rn-c001").exists() and (stub / "running" / "other-c009").exists()


def test_a_renamed_accounting_container_goes_before_the_new_one_is_made(tmp_path):
    """accounting.name db -> acct is an update of the same resource: the engine hands back the
    old name (the previous stdout); the old container stops cleanly and goes first."""
    from components.slurm.accounting import FILES as SLURM_FILES

    stub, lxc_path = lxc_stubs(tmp_path), tmp_path / "lxc"
    container(lxc_path, "rn-db", "rn", running_in=stub / "running")
    (tmp_path / "data").mkdir()
    done = run_script(
        SLURM_FILES / "dbd_container_create.sh",
        stub,
        {
            "LXC_PATH": str(lxc_path),
            "CLUSTER": "rn",
            "CLUSTER_DIR": str(tmp_path / "state"),
            "CONTAINER": "rn-acct",
            "NODE_HOSTNAME": "acct",
            "LXC_CONFIG": "lxc.net.0.ipv4.address = 10.98.3.20/24\n",
            "NAT_ADDRESS": "10.98.3.20",
            "RELEASE": "bookworm",
            "PACKAGES": "mariadb-server",
            "DATA_DIR": str(tmp_path / "data"),
            "PULUMI_COMMAND_STDOUT": "rn-db",
        },
    )
    calls = [" ".join(call.split()[:2]) for call in (stub / "calls").read_text().splitlines()]
    assert done.returncode != 0 and calls[-1] == "lxc-create rn-acct", (done.stderr, calls)
    assert calls[:2] == ["lxc-stop rn-db", "lxc-destroy rn-db"], calls
    assert "-t 60" in (stub / "calls").read_text().splitlines()[0]
    assert not (lxc_path / "rn-db").exists()


def test_the_node_image_is_not_removed_from_under_a_clone_no_state_holds(tmp_path):
    """A clone left by a failed create is in no state, so destroy never deletes it: the image's
    delete names it and stops, instead of removing the clone's lower layer."""
    from components.lxc.node_image import FILES as IMAGE_FILES

    stub, lxc_path = lxc_stubs(tmp_path), tmp_path / "lxc"
    container(lxc_path, "or-image", "or")
    container(lxc_path, "or-c000", "or")
    (lxc_path / "or-c000" / "config").write_text(f"lxc.rootfs.path = overlay:{lxc_path}/or-image/rootfs:x\n")
    for keep in ("false", "true"):
        done = run_script(
            IMAGE_FILES / "image_delete.sh",
            stub,
            {
                "LXC_PATH": str(lxc_path),
                "CLUSTER": "or",
                "CLUSTER_DIR": str(tmp_path / "state"),
                "IMAGE": "or-image",
                "RELEASE": "bookworm",
                "KEPT_DIR": str(tmp_path / "kept"),
                "KEEP_IMAGE": keep,
            },
        )
        assert done.returncode == 1 and "still has containers cloned from it: or-c000" in done.stderr, done.stderr
        assert (lxc_path / "or-image" / "config").exists()
    (lxc_path / "or-c000" / "config").unlink()
    (lxc_path / "or-c000").rename(tmp_path / "gone")
    done = run_script(
        IMAGE_FILES / "image_delete.sh",
        stub,
        {
            "LXC_PATH": str(lxc_path),
            "CLUSTER": "or",
            "CLUSTER_DIR": str(tmp_path / "state"),
            "IMAGE": "or-image",
            "RELEASE": "bookworm",
            "KEPT_DIR": str(tmp_path / "kept"),
            "KEEP_IMAGE": "false",
        },
    )
    assert done.returncode == 0, done.stderr
    assert not (lxc_path / "or-image").exists()


def test_the_web_app_moved_between_ssh_hosts_leaves_nothing_on_the_old_host(recorded):
    """The app's status writer, container, service and forward rules go on gpu2, then come on gpu3."""
    before = three_hosts()
    before["cluster"]["web_app"].update(host="gpu2", nat_address="10.47.3.10")
    after = copy.deepcopy(before)
    after["cluster"]["web_app"].update(host="gpu3", nat_address="10.48.3.10")
    old = commands(before)
    with_delete = {c.name for c in old if c.delete}
    state = State({c.urn: StateEntry(c) for c in old})
    _, actions = up(state, commands(after))
    web = {name: action for name, action in actions.items() if name.startswith(("duo-web-", "duo-fwd-"))}
    assert web and set(web.values()) == {"replace"}, web
    for name in web:
        steps = [(kind, host) for ran, kind, host in recorded if ran == name]
        deletes = [host for kind, host in steps if kind == "delete"]
        assert [host for kind, host in steps if kind == "create"] == [GPU3], (name, steps)
        assert deletes == ([GPU2] if name in with_delete else []), (name, steps)
    by_name = {entry.command.name: entry.command for entry in state.resources.values()}
    assert all(by_name[name].connection["host"] == GPU3 for name in web)
