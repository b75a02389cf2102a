"""LXC 5 config of a CUDA container, rendered from the cluster config.

The text goes into /var/lib/lxc/<name>/gpucluster.conf, included at the end of the clone's
own config. Only host facts that cannot be known before the host is reached (the device
numbers of the container's GPUs and control devices, which driver files exist) are added by
the container script.

Why privileged, and what that keeps: the nodes run systemd, munged, slurmd and slurmctld,
which need real root (cgroup management for Slurm's job containment, mounts, binding host
device nodes); an unprivileged container would need a subordinate id map on every host and
still could not see the host's NVIDIA device nodes owned by host root. So the containers
are privileged and confined by what does not depend on user namespaces:
  - the device cgroup: LXC's default denies every device but a few (null, zero, tty...);
    we allow exactly this container's GPUs and the driver's control devices (no `195:*`),
    so a root that mknods another GPU's node cannot open it;
  - the device limits live in a cgroup the container cannot see (dir.container.inner):
    its root cannot write itself a new devices.allow;
  - capabilities: LXC's Debian defaults drop mac_admin, mac_override, sys_time, sys_module
    and sys_rawio; we also drop what neither systemd nor Slurm nor munge use in a node
    (sys_boot, syslog, sys_pacct, wake_alarm, block_suspend, audit_control). Kept: sys_admin
    (systemd, mounts), net_admin (links up at boot), mknod, sys_resource, sys_nice and the
    rest that Slurm's job control and systemd's units use;
  - no AppArmor nesting allowance (lxc.apparmor.allow_nesting = 0, overriding Debian's
    /etc/lxc/default.conf), LXC's default seccomp filter (no kexec, module loading,
    open_by_handle_at).
The login node, where people run what they like and no GPU work, is the exception: an
unprivileged container (`ContainerSpec.id_map`, a user namespace; components/slurm/login.py).
"""

from dataclasses import dataclass
from ipaddress import IPv4Address

from pulumi import Input

from components.common.rendering import HEADER, container_device_path
from components.lxc.config import GpuConfig
from components.network.config import NetworkConfig

# Dropped besides LXC's Debian defaults (mac_admin mac_override sys_time sys_module sys_rawio),
# repeated here so the config says it whatever the template includes.
DROPPED_CAPABILITIES = (
    "mac_admin mac_override sys_time sys_module sys_rawio "
    "sys_boot syslog sys_pacct wake_alarm block_suspend audit_control"
)


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
    cpus: int | None = None  # a Slurm node's CPUs: its cpuset; None: no pinning (the web app)
    cpu_slot: int = 0  # where the node's CPUs start in its host's online CPU list (cpu_slots)
    memory_mb: Input[int] | None = None  # the container's memory limit (MB); None: none (the web app)
    # (host directory, path in the container) pairs bound read-only (the web app's snapshot);
    # the host directory must exist before the container starts
    read_only_mounts: tuple[tuple[str, str], ...] = ()
    # Unprivileged: the user namespace's map, ("u" or "g", first container id, first host id,
    # count) per range (login_id_map); its files belong to those host ids. No GPU or driver
    # file is bound into it. Empty: privileged (a node, the web app).
    id_map: tuple[tuple[str, int, int, int], ...] = ()


def cpu_slots(nodes) -> dict[str, int]:
    """Where each node's CPUs start in its host's online CPU list: the host's CPUs are dealt to
    its nodes in turn (node order), so nodes share a CPU only when the host has too few for
    all of them (the list wraps around)."""
    slots, taken = {}, 0
    for node in nodes:
        slots[node.name] = taken
        taken += node.cpus
    return slots


def container_devices(spec: ContainerSpec, gpu: GpuConfig) -> list[str]:
    """Host device nodes the container may open: its own GPUs and the control devices (none
    for an unprivileged container: no GPU work runs there)."""
    return [] if spec.id_map else spec.gpu_devices + gpu.control_devices


def _unprivileged_lines(id_map: tuple[tuple[str, int, int, int], ...]) -> list[str]:
    """A user namespace: LXC's own settings for one (a full set of capabilities in the
    namespace, none of the host's; no devices cgroup rules of its own), then the map."""
    return [
        "# Unprivileged (components/lxc/lxc_conf.py): a user namespace whose root is no host root.\n",
        "lxc.include = /usr/share/lxc/config/userns.conf\n",
        *(f"lxc.idmap = {kind} {first} {host} {count}\n" for kind, first, host, count in id_map),
    ]


def _base_lines(
    hostname: str,
    nat_address: IPv4Address,
    network: NetworkConfig,
    container: str,
    id_map: tuple[tuple[str, int, int, int], ...] = (),
) -> list[str]:
    """Hostname, autostart, the confinement, and a veth with a static address on the NAT bridge."""
    nat = network.nat_bridge
    confinement = (
        _unprivileged_lines(id_map)
        if id_map
        else [
            "# Privileged, confined (see components/lxc/lxc_conf.py): no AppArmor nesting, fewer\n",
            "# capabilities, device limits in a cgroup the container cannot write.\n",
        ]
    )
    return [
        HEADER,
        f"lxc.uts.name = {hostname}\n",
        "lxc.start.auto = 1\n",
        *confinement,
        "lxc.apparmor.allow_nesting = 0\n",
        f"lxc.cap.drop = {DROPPED_CAPABILITIES}\n",
        f"lxc.cgroup.dir.monitor = lxc.monitor.{container}\n",
        f"lxc.cgroup.dir.container = lxc.payload.{container}\n",
        "lxc.cgroup.dir.container.inner = ns\n",
        # Drop the template's network so only ours remain.
        "lxc.net =\n",
        "lxc.net.0.type = veth\n",
        f"lxc.net.0.link = {nat.name}\n",
        "lxc.net.0.name = eth0\n",
        "lxc.net.0.flags = up\n",
        f"lxc.net.0.ipv4.address = {nat_address}/{nat.subnet.prefixlen}\n",
        f"lxc.net.0.ipv4.gateway = {nat.address.ip}\n",
    ]


def render_service_lxc_config(
    hostname: str, nat_address: IPv4Address, network: NetworkConfig, mounts: dict[str, str], container: str
) -> str:
    """A container without GPUs on the NAT bridge (the accounting database), with host
    directories bound in (`mounts`: host path -> container path), so its data outlives it."""
    lines = _base_lines(hostname, nat_address, network, container)
    lines += [_mount(source, target, "bind,create=dir") for source, target in mounts.items()]
    return "".join(lines)


def render_lxc_config(
    spec: ContainerSpec, network: NetworkConfig, gpu: GpuConfig, shared_dir: str, container: str
) -> str:
    hostname, nat_address, cluster_address = spec.hostname, spec.nat_address, spec.cluster_address
    lines = _base_lines(hostname, nat_address, network, container, spec.id_map)
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
    if spec.cpus is not None:
        lines.append(
            f"# CPUs: {spec.cpus} of the host's online CPUs from place {spec.cpu_slot} of their list, as many as\n"
            "# slurm.conf's CPUs= (the cpuset lines are appended by the container script, which reads the list).\n"
        )
    if spec.memory_mb is not None:
        holds = (
            "what its people run, and no more: a login node past it"
            if spec.id_map
            else "the node's jobs (Slurm's RealMemory) and its own daemons, and no more: a node past it"
        )
        # The figure travels apart (MEMORY_MB): a node's share of its host is known only once the
        # host is measured, and the text stays the same whatever the figure.
        lines += [
            f"# Memory: {holds}\n",
            "# meets its own OOM killer, never its neighbours'. Each version's key; LXC uses its host's\n",
            "# (the limit lines are appended by the container script, from the container's MEMORY_MB).\n",
        ]
    lines.append(
        "# GPUs: the devices cgroup allows exactly the devices bound below, by their host numbers\n"
        "# (appended by the container script; no GPU or control device is allowed by major alone).\n"
    )
    for device in container_devices(spec, gpu):
        lines.append(_mount(device, container_device_path(device), "bind,optional,create=file"))
    if gpu.cuda_path and not spec.id_map:
        path = gpu.cuda_path
        lines.append(_mount(path, path, "bind,ro,optional,create=dir"))
    shared = shared_dir
    lines.append(_mount(shared, shared, "bind,create=dir"))
    for source, target in spec.read_only_mounts:
        lines.append(_mount(source, target, "bind,ro,create=dir"))
    return "".join(lines)
