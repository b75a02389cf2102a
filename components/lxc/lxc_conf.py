"""LXC 5 config of a CUDA container, rendered from the cluster config.

The text goes into /var/lib/lxc/<name>/gpucluster.conf, included at the end of the clone's
own config. Only host facts that cannot be known before the host is reached (the dynamic
nvidia-uvm major, which driver files exist) are added by the container script.
"""

from dataclasses import dataclass
from ipaddress import IPv4Address

from components.config import GpuConfig, NetworkConfig
from components.slurm.slurm_conf import HEADER, container_device_path

NVIDIA_MAJOR = 195


def _mount(source: str, target: str, options: str, kind: str = "none") -> str:
    # LXC wants the target relative to the rootfs.
    return f"lxc.mount.entry = {source} {target.lstrip('/')} {kind} {options} 0 0\n"


@dataclass(frozen=True)
class ContainerSpec:
    """One container: its hostname, addresses and the GPU device nodes it gets."""

    hostname: str
    nat_address: IPv4Address
    cluster_address: IPv4Address | None  # None: not on the cluster bridge (the web app)
    gpu_devices: list[str]
    # (host directory, path in the container) pairs bound read-only (the web app's snapshot);
    # the host directory must exist before the container starts
    read_only_mounts: tuple[tuple[str, str], ...] = ()


def render_lxc_config(spec: ContainerSpec, network: NetworkConfig, gpu: GpuConfig, shared_dir: str) -> str:
    hostname, nat_address, cluster_address = spec.hostname, spec.nat_address, spec.cluster_address
    nat = network.nat_bridge
    lines = [
        HEADER,
        f"lxc.uts.name = {hostname}\n",
        "lxc.start.auto = 1\n",
        # Drop the template's network so only ours remain.
        "lxc.net =\n",
        "lxc.net.0.type = veth\n",
        f"lxc.net.0.link = {nat.name}\n",
        "lxc.net.0.name = eth0\n",
        "lxc.net.0.flags = up\n",
        f"lxc.net.0.ipv4.address = {nat_address}/{nat.subnet.prefixlen}\n",
        f"lxc.net.0.ipv4.gateway = {nat.address.ip}\n",
    ]
    if cluster_address is not None:
        cluster = network.cluster_bridge
        lines += [
            "lxc.net.1.type = macvlan\n",
            "lxc.net.1.macvlan.mode = bridge\n",
            f"lxc.net.1.link = {cluster.name}\n",
            "lxc.net.1.name = eth1\n",
            "lxc.net.1.flags = up\n",
            f"lxc.net.1.ipv4.address = {cluster_address}/{cluster.subnet.prefixlen}\n",
        ]
    lines += [
        "# GPUs: allow NVIDIA's major on cgroup v1 and v2 hosts (LXC ignores the other one).\n",
        f"lxc.cgroup.devices.allow = c {NVIDIA_MAJOR}:* rwm\n",
        f"lxc.cgroup2.devices.allow = c {NVIDIA_MAJOR}:* rwm\n",
    ]
    for device in spec.gpu_devices + gpu.control_devices:
        lines.append(_mount(device, container_device_path(device), "bind,optional,create=file"))
    if gpu.cuda_path:
        path = gpu.cuda_path
        lines.append(_mount(path, path, "bind,ro,optional,create=dir"))
    shared = shared_dir
    lines.append(_mount(shared, shared, "bind,create=dir"))
    for source, target in spec.read_only_mounts:
        lines.append(_mount(source, target, "bind,ro,create=dir"))
    return "".join(lines)
