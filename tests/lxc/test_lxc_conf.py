"""Rendered LXC config: exact lines, and accepted by LXC 5.

The acceptance check loads the text with the real tool (installed by .ci/run): `lxc-info`
loads an LXC config and fails on an unknown key.
"""

import copy
import os
import shutil
import subprocess
from ipaddress import IPv4Address
from pathlib import Path

from components.common.transport import helpers
from components.composition.config import ClusterConfig
from components.lxc.cuda_container import FILES
from components.lxc.lxc_conf import ContainerSpec, container_devices, cpu_slots, render_lxc_config
from components.slurm.config import NODE_DAEMON_MEMORY_MB
from tests.harness.program_harness import measured, stack_config


def cluster(stack: str = "e2e", **changes) -> ClusterConfig:
    raw = copy.deepcopy(stack_config(stack)["cluster"])
    raw.update(changes)
    return ClusterConfig.model_validate(raw)


def lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def node_lxc_config(config: ClusterConfig, index: int = 0) -> str:
    node = config.nodes[index]
    spec = ContainerSpec(
        node.name,
        node.nat_address,
        node.cluster_address,
        config.gpu_assignment()[node.name],
        node.cpus,
        memory_mb=measured(config).nodes[index].memory + NODE_DAEMON_MEMORY_MB,
    )
    return render_lxc_config(spec, config.network, config.gpu, config.host.shared_dir, config.container_name(node.name))


def test_lxc_config_networks_devices_and_mounts():
    body = lines(node_lxc_config(cluster(), 1))
    expected = [
        "lxc.uts.name = c001",
        "lxc.net =",
        "lxc.net.0.type = veth",
        "lxc.net.0.link = e2ebr0",
        "lxc.net.0.ipv4.address = 10.43.3.3/24",
        "lxc.net.0.ipv4.gateway = 10.43.3.1",
        "lxc.net.1.type = macvlan",
        "lxc.net.1.macvlan.mode = bridge",
        "lxc.net.1.link = e2ebr1",
        "lxc.net.1.ipv4.address = 10.43.5.2/24",
        "lxc.mount.entry = /run/gpucluster-e2e-dev/nvidia1 dev/nvidia1 none bind,optional,create=file 0 0",
        "lxc.mount.entry = /run/gpucluster-e2e-dev/nvidiactl dev/nvidiactl none bind,optional,create=file 0 0",
        "lxc.mount.entry = /usr/local/cuda usr/local/cuda none bind,ro,optional,create=dir 0 0",
        "lxc.mount.entry = /srv/gpucluster/e2e/shared srv/gpucluster/e2e/shared none bind,create=dir 0 0",
    ]
    for line in expected:
        assert line in body
    # The cpuset depends on the host's online CPUs: the container script appends it.
    assert not [line for line in body if "cpuset" in line]
    # Only this node's GPU: another node's device never reaches it, and no GPU is allowed by
    # its major alone (the script adds this node's exact major:minor, see below).
    assert not any("nvidia0 " in line for line in body)
    assert not any("devices.allow" in line for line in body), body


def test_node_containers_are_confined():
    body = lines(node_lxc_config(cluster(), 1))
    assert "lxc.apparmor.allow_nesting = 0" in body
    assert not any("nesting.conf" in line for line in body)
    (drop,) = [line for line in body if line.startswith("lxc.cap.drop = ")]
    dropped = set(drop.removeprefix("lxc.cap.drop = ").split())
    assert {"sys_module", "sys_rawio", "mac_admin", "mac_override", "sys_time", "sys_boot"} <= dropped
    # What systemd, munge and Slurm need stays.
    assert not dropped & {"sys_admin", "mknod", "setuid", "setgid", "chown", "kill", "sys_resource", "net_admin"}
    # The device limits sit in an outer cgroup the container cannot write.
    assert "lxc.cgroup.dir.container = lxc.payload.e2e-c001" in body
    assert "lxc.cgroup.dir.monitor = lxc.monitor.e2e-c001" in body
    assert "lxc.cgroup.dir.container.inner = ns" in body


def device_allow_lines(devices: list[str]) -> list[str]:
    lib = helpers()
    done = subprocess.run(
        ["/bin/bash", "-c", lib + '\ndevice_allow_lines "$1"', "test", "\n".join(devices)],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.splitlines()


def test_device_allow_lines_are_exactly_the_containers_devices_by_their_host_numbers():
    # /dev/null is 1:3 and /dev/zero 1:5 on every Linux host; a missing (optional) device gets none.
    assert device_allow_lines(["/dev/null", "/dev/does-not-exist", "/dev/zero"]) == [
        "lxc.cgroup.devices.allow = c 1:3 rwm",
        "lxc.cgroup2.devices.allow = c 1:3 rwm",
        "lxc.cgroup.devices.allow = c 1:5 rwm",
        "lxc.cgroup2.devices.allow = c 1:5 rwm",
    ]
    # Not a character device (a directory, a regular file): nothing.
    assert device_allow_lines(["/dev", "/etc/hostname"]) == []


def test_each_container_is_given_its_own_gpus_and_the_control_devices():
    config = cluster()
    assignment = config.gpu_assignment()
    for node in config.nodes:
        spec = ContainerSpec(node.name, node.nat_address, node.cluster_address, assignment[node.name])
        assert container_devices(spec, config.gpu) == [
            f"/run/gpucluster-e2e-dev/nvidia{node.name[-1]}",
            "/run/gpucluster-e2e-dev/nvidiactl",
        ]


def test_web_app_container_is_not_on_the_cluster_bridge():
    config = cluster()
    spec = ContainerSpec("web", IPv4Address("10.43.3.10"), None, config.web_app.gpus)
    text = render_lxc_config(spec, config.network, config.gpu, config.host.shared_dir, "e2e-web")
    assert "lxc.net.1" not in text
    assert "lxc.net.0.ipv4.address = 10.43.3.10/24" in text
    assert "cpuset" not in text  # not a Slurm node: no CPUs to declare
    assert "memory" not in text  # nor memory


def test_a_node_container_holds_its_jobs_memory_and_its_daemons(tmp_path):
    """The rendered text names the limit; the container script writes it from MEMORY_MB (a
    node's share of its host is known only once the host is measured)."""
    raw = copy.deepcopy(stack_config("e2e")["cluster"])
    raw["nodes"][0]["memory_mb"] = 3000
    text = node_lxc_config(ClusterConfig.model_validate(raw))
    assert [line for line in lines(text) if "memory" in line] == []
    assert "appended by the container script, from the container's MEMORY_MB" in text
    limit = (3000 + NODE_DAEMON_MEMORY_MB) * 1024 * 1024
    # The script's memory part, after the shared helpers.
    text = (FILES / "container_create.sh").read_text()
    part = text[text.index("# Its memory limit (MEMORY_MB") : text.index("\ndir=$(lxc_dir")]
    probe = f'{helpers()}\n{part}\nprintf "%s" "$memory_lines"'
    environment = {"PATH": os.environ["PATH"], "MEMORY_MB": str(3000 + NODE_DAEMON_MEMORY_MB)}
    done = subprocess.run(["/bin/bash", "-c", probe], env=environment, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"lxc.cgroup.memory.limit_in_bytes = {limit}",
        f"lxc.cgroup2.memory.max = {limit}",
        "lxc.cgroup2.memory.swap.max = 0",
    ]
    bad = subprocess.run(
        ["/bin/bash", "-c", probe], env=environment | {"MEMORY_MB": "1e9"}, capture_output=True, text=True, check=False
    )
    assert bad.returncode == 1 and "MEMORY_MB must be a number of MB, got '1e9'" in bad.stderr


def lxc_loads(text: str, tmp_path: Path) -> subprocess.CompletedProcess:
    assert shutil.which("lxc-info"), "lxc-info is missing: run `bash .ci/run` (installs lxc)"
    container = tmp_path / "probe"
    container.mkdir()
    (container / "config").write_text(f"lxc.rootfs.path = dir:{container}/rootfs\n{text}")
    return subprocess.run(
        ["lxc-info", "-P", str(tmp_path), "-n", "probe", "-c", "lxc.net.1.link"],
        capture_output=True,
        text=True,
        check=False,
    )


def test_lxc5_loads_the_rendered_config(tmp_path):
    done = lxc_loads(node_lxc_config(cluster()), tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "lxc.net.1.link = e2ebr1"


def test_lxc5_rejects_the_tutorials_lxc08_keys(tmp_path):
    done = lxc_loads(node_lxc_config(cluster()) + "lxc.network.type = veth\n", tmp_path)
    assert done.returncode != 0


def test_the_hosts_cpus_are_dealt_to_its_nodes_in_turn():
    config = cluster()  # four nodes of two CPUs each
    assert cpu_slots(config.nodes) == {"c000": 0, "c001": 2, "c002": 4, "c003": 6}
    one_each = cluster(nodes=[{**node, "cpus": 1} for node in stack_config("e2e")["cluster"]["nodes"]])
    assert cpu_slots(one_each.nodes) == {"c000": 0, "c001": 1, "c002": 2, "c003": 3}
