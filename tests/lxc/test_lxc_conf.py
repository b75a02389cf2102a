"""Rendered LXC config: exact lines, and accepted by LXC 5.

The acceptance check loads the text with the real tool (installed by .ci/run): `lxc-info`
loads an LXC config and fails on an unknown key.
"""

import copy
import shutil
import subprocess
from ipaddress import IPv4Address
from pathlib import Path

from components.config import ClusterConfig
from components.lxc.lxc_conf import ContainerSpec, render_lxc_config
from tests.harness.program_harness import stack_config


def cluster(stack: str = "e2e", **changes) -> ClusterConfig:
    raw = copy.deepcopy(stack_config(stack)["cluster"])
    raw.update(changes)
    return ClusterConfig.model_validate(raw)


def lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def node_lxc_config(config: ClusterConfig, index: int = 0) -> str:
    node = config.nodes[index]
    spec = ContainerSpec(
        node.name, node.nat_address, node.cluster_address, config.gpu_assignment()[node.name], node.cpus
    )
    return render_lxc_config(spec, config.network, config.gpu, config.host.shared_dir)


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
        "lxc.cgroup.devices.allow = c 195:* rwm",
        "lxc.cgroup2.devices.allow = c 195:* rwm",
        # The node's two CPUs (slurm.conf CPUs=2) are host CPUs 0-1.
        "lxc.cgroup.cpuset.cpus = 0-1",
        "lxc.cgroup2.cpuset.cpus = 0-1",
        "lxc.mount.entry = /run/gpucluster-e2e-dev/nvidia1 dev/nvidia1 none bind,optional,create=file 0 0",
        "lxc.mount.entry = /run/gpucluster-e2e-dev/nvidiactl dev/nvidiactl none bind,optional,create=file 0 0",
        "lxc.mount.entry = /usr/local/cuda usr/local/cuda none bind,ro,optional,create=dir 0 0",
        "lxc.mount.entry = /srv/gpucluster/e2e/shared srv/gpucluster/e2e/shared none bind,create=dir 0 0",
    ]
    for line in expected:
        assert line in body
    # Only this node's GPU: another node's device never reaches it.
    assert not any("nvidia0 " in line for line in body)


def test_web_app_container_is_not_on_the_cluster_bridge():
    config = cluster()
    spec = ContainerSpec("web", IPv4Address("10.43.3.10"), None, config.gpu.devices[:1])
    text = render_lxc_config(spec, config.network, config.gpu, config.host.shared_dir)
    assert "lxc.net.1" not in text
    assert "lxc.net.0.ipv4.address = 10.43.3.10/24" in text
    assert "cpuset" not in text  # not a Slurm node: no CPUs to declare


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
