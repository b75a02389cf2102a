"""The host preflight (components/host/files/preflight.sh) on this machine: every bad host fact
is reported, by name, before anything is changed. Needs root for mknod and dummy links."""

import json
import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from components.host.gpu_host import FILES
from components.transport import INTERPRETER, script

PREFLIGHT = script(FILES / "preflight.sh")


def host_state() -> tuple[str, str]:
    links = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True, check=True).stdout
    rules = subprocess.run(["iptables-save"], capture_output=True, text=True, check=False).stdout
    return links, "\n".join(line for line in rules.splitlines() if not line.startswith("#"))


@pytest.fixture
def preflight(tmp_path):
    assert os.geteuid() == 0, "the preflight tests need root (mknod, foreign interfaces)"
    assert shutil.which("ss") and shutil.which("ip"), "iproute2 is missing: run `bash .ci/run`"
    device = tmp_path / "nvidia0"
    subprocess.run(["mknod", str(device), "c", "195", "0"], check=True)
    environment = {
        "CLUSTER": "pft",
        "IMAGE": "pft-image",
        "GPU_DEVICES": str(device),
        "NAT_BRIDGE": "pftbr0",
        "NAT_ADDRESS": "10.97.3.1/24",
        "CLUSTER_BRIDGE": "pftbr1",
        "CLUSTER_SUBNET": "10.97.5.0/24",
        "HOST_PORTS": "",
        "CONTAINERS": "pft-c000",
        "CLUSTER_DIR": str(tmp_path / "state"),
    }
    made_links: list[str] = []

    def run(**changes) -> subprocess.CompletedProcess:
        before = host_state()
        done = subprocess.run(
            [*INTERPRETER, PREFLIGHT],
            env={"PATH": os.environ["PATH"], **environment, **changes},
            capture_output=True,
            text=True,
            check=False,
        )
        assert host_state() == before, "the preflight changed the host"
        return done

    def dummy(name: str, address: str | None = None) -> None:
        subprocess.run(["ip", "link", "add", name, "type", "bridge"], check=True)
        made_links.append(name)
        if address:
            subprocess.run(["ip", "addr", "add", address, "dev", name], check=True)

    def alias(name: str, text: str) -> None:
        subprocess.run(["ip", "link", "set", name, "alias", text], check=True)

    run.dummy = dummy
    run.alias = alias
    run.device = device
    run.cluster_dir = tmp_path / "state"
    yield run
    for name in made_links:
        subprocess.run(["ip", "link", "del", name], check=False)


def test_a_good_host_passes_and_reports_what_it_found(preflight):
    done = preflight()
    assert done.returncode == 0, done.stderr
    facts = json.loads(done.stdout.splitlines()[-1])
    assert facts["devices"] == [str(preflight.device)]
    assert facts["cgroup_version"] in {"1", "2"}
    assert facts["driver_version"]
    assert facts["uvm_major"]


def test_a_missing_gpu_device_is_named(preflight):
    done = preflight(GPU_DEVICES="/dev/nvidia7")
    assert done.returncode == 1
    assert "GPU device /dev/nvidia7 is missing (gpu.devices): is the NVIDIA driver loaded?" in done.stderr
    assert "Without a GPU, use stand-ins: gpu.stand_in, as stacks/Pulumi.nogpu.yaml does" in done.stderr
    assert "nothing was changed" in done.stderr


def test_a_device_that_is_not_nvidias_is_refused(preflight, tmp_path):
    fake = tmp_path / "nvidia1"
    fake.touch()
    done = preflight(GPU_DEVICES=str(fake))
    assert f"GPU device {fake} is not a character device with NVIDIA's major 195" in done.stderr


def test_a_foreign_interface_with_the_bridge_name_is_refused(preflight):
    preflight.dummy("pftbr0")
    done = preflight()
    assert done.returncode == 1
    assert "interface pftbr0 already exists and is not this cluster's" in done.stderr


def test_a_subnet_already_in_use_is_refused(preflight):
    # As Debian's lxc-net does with lxcbr0 10.0.3.1/24 on stock hosts.
    preflight.dummy("pftother0", "10.97.3.9/24")
    done = preflight()
    assert done.returncode == 1
    assert "pftother0 already has 10.97.3.9/24, inside 10.97.3.0/24 (network.nat_bridge.address)" in done.stderr


def test_a_host_port_in_use_is_refused(preflight):
    with socket.socket() as listener:
        listener.bind(("0.0.0.0", 0))
        listener.listen()
        port = listener.getsockname()[1]
        done = preflight(HOST_PORTS=f"{port}\n")
    assert done.returncode == 1
    assert f"host port {port} is in use by a listening process" in done.stderr


def test_a_foreign_container_with_a_node_name_is_refused(preflight):
    container = Path("/var/lib/lxc/pft-c000")
    container.mkdir(parents=True)
    try:
        (container / "config").write_text("lxc.uts.name = someone-elses\n")
        done = preflight()
    finally:
        shutil.rmtree(container)
    assert "LXC container pft-c000 already exists and is not this cluster's" in done.stderr


def test_every_problem_is_reported_at_once(preflight):
    preflight.dummy("pftbr1")
    done = preflight(GPU_DEVICES="/dev/nvidia7")
    assert "/dev/nvidia7 is missing" in done.stderr
    assert "interface pftbr1 already exists" in done.stderr


def test_a_host_port_forwarded_by_someone_else_is_refused(preflight):
    rule = ["PREROUTING", "-p", "tcp", "--dport", "7999", "-j", "DNAT", "--to-destination", "10.96.0.2:80"]
    subprocess.run(["iptables", "-t", "nat", "-A", *rule], check=True)
    try:
        done = preflight(HOST_PORTS="7999")
    finally:
        subprocess.run(["iptables", "-t", "nat", "-D", *rule], check=True)
    assert done.returncode == 1
    assert "host port 7999 is already forwarded by another iptables DNAT rule" in done.stderr


def test_a_bridge_of_another_cluster_names_it_and_the_rename_case(preflight):
    # What a changed `name` meets: the old cluster's bridges, marked with its name.
    preflight.dummy("pftbr0")
    preflight.alias("pftbr0", "gpucluster:oldname")
    done = preflight()
    assert done.returncode == 1
    assert (
        "interface pftbr0 belongs to the cluster 'oldname' (network.*.name): if you renamed the cluster (name), "
        "destroy it under its old name first"
    ) in done.stderr


def test_a_moved_state_dir_of_a_running_cluster_is_refused(preflight):
    preflight.dummy("pftbr0")
    preflight.alias("pftbr0", "gpucluster:pft")
    done = preflight()
    assert done.returncode == 1
    assert "changing host.state_dir in place is not supported" in done.stderr
    preflight.cluster_dir.mkdir()
    (preflight.cluster_dir / "munge.key").write_text("k")
    assert preflight().returncode == 0


def half_made_clone(preflight, rootfs: str) -> subprocess.CompletedProcess:
    """A clone whose create was cut between lxc-copy and the owner marker: only the pending
    marker, written before the clone, says whose it is."""
    container = Path("/var/lib/lxc/pft-c000")
    container.mkdir(parents=True)
    pending = preflight.cluster_dir / "pending" / "pft-c000"
    pending.parent.mkdir(parents=True)
    pending.touch()
    try:
        (container / "config").write_text(f"lxc.rootfs.path = {rootfs}\n")
        return preflight()
    finally:
        shutil.rmtree(container)


def test_a_clone_cut_short_before_its_owner_marker_is_still_ours(preflight):
    done = half_made_clone(preflight, "overlay:/var/lib/lxc/pft-image/rootfs:/var/lib/lxc/pft-c000/delta0")
    assert done.returncode == 0, done.stderr


def test_a_pending_marker_does_not_claim_a_container_on_another_image(preflight):
    done = half_made_clone(preflight, "overlay:/var/lib/lxc/other-image/rootfs:/var/lib/lxc/pft-c000/delta0")
    assert "LXC container pft-c000 already exists and is not this cluster's" in done.stderr


def test_a_controller_port_in_use_on_the_host_is_refused(preflight):
    with socket.socket() as listener:
        listener.bind(("0.0.0.0", 0))
        listener.listen()
        port = listener.getsockname()[1]
        done = preflight(CONTROLLER_PORT=str(port))
    assert done.returncode == 1
    assert f"port {port} (slurmctld) is in use on this host" in done.stderr
    assert "place this cluster's controller in a node container" in done.stderr
