"""Typed config of the local GPU Slurm cluster, read from the stack's `gpu-cluster:cluster` key.

Field rules (types, ranges, patterns) live on the fields; rules that relate several fields
are small named functions in CLUSTER_RULES, all run together so one `pulumi up` reports
every problem at once, each naming the field and what it accepts.
"""

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Interface, IPv4Network
from typing import Literal

import hostlist
from pydantic import Field, model_validator

from components.config_types import (
    Hostname,
    InterfaceName,
    PackageName,
    Port,
    SafeGlob,
    SafePath,
    StrictModel,
)


class HostConfig(StrictModel):
    """The machine the cluster is built on."""

    state_dir: SafePath = Field(
        "/var/lib/gpucluster",
        description="where per-cluster state lives (munge key, rendered configs, markers)",
    )
    shared_dir: SafePath = Field(
        description="host directory bind-mounted at the same path in every node and the web "
        "app, so a job script written there once runs anywhere",
    )
    install_packages: bool = Field(True, description="install the Debian packages the host needs (apt-get)")


class NatBridgeConfig(StrictModel):
    """Bridge with an address on the host: veth links, NAT to the outside, host <-> nodes."""

    name: InterfaceName = Field(description="bridge interface name")
    address: IPv4Interface = Field(
        description="the bridge's address with prefix (gateway of the nodes), e.g. 10.10.3.1/24"
    )

    @property
    def subnet(self) -> IPv4Network:
        return self.address.network


class ClusterBridgeConfig(StrictModel):
    """Bridge without a host address: lower device of the nodes' macvlan links."""

    name: InterfaceName = Field(description="bridge interface name")
    subnet: IPv4Network = Field(description="subnet of the nodes' macvlan addresses")


class NetworkConfig(StrictModel):
    nat_bridge: NatBridgeConfig
    cluster_bridge: ClusterBridgeConfig


class StandInGpus(StrictModel):
    """Stand-in GPUs for a machine without one: the program makes them and removes them."""

    count: int = Field(
        ge=1,
        le=64,
        strict=True,
        description="character devices with NVIDIA's major 195 made in the cluster's private "
        "device directory (/run/gpucluster-<name>-dev/nvidia0..count-1, plus nvidiactl); they "
        "become gpu.devices and gpu.control_devices. Refused on a host with an NVIDIA driver",
    )


class GpuConfig(StrictModel):
    """GPU device nodes of the host, passed through to containers."""

    devices: list[SafePath] = Field(
        ["/dev/nvidia0"],
        description="one character device per GPU (major 195); gres.conf lists them by the "
        "same name inside the containers (/dev/<basename>)",
    )
    control_devices: list[SafePath] = Field(
        ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"],
        description="driver control devices bound into every container when present",
    )
    stand_in: StandInGpus | None = Field(
        None,
        description="make stand-in devices instead of using real GPUs (leave devices and "
        "control_devices unset: they are the stand-ins)",
    )
    share_between_nodes: bool = Field(
        False,
        description="let several nodes use the same GPU (the tutorial shares one GPU between "
        "four nodes); off, each GPU belongs to one node",
    )
    cuda_path: SafePath | None = Field(
        "/usr/local/cuda",
        description="CUDA toolkit on the host, bound read-only at the same path when present",
    )
    driver_files: list[SafeGlob] = Field(
        [
            "/usr/lib/x86_64-linux-gnu/libcuda.so*",
            "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so*",
            "/usr/lib/x86_64-linux-gnu/libnvidia-ptxjitcompiler.so*",
            "/usr/bin/nvidia-smi",
        ],
        description="driver user-space files (glob patterns) bound read-only when present; "
        "they must match the host's kernel module, so they are never copied",
    )


class ImageConfig(StrictModel):
    """The node image every container is cloned from (built once, no per-node downloads)."""

    release: Literal["bookworm"] = Field("bookworm", description="Debian release")
    extra_packages: list[PackageName] = Field(
        [], description="packages added to the image besides slurmd, munge, slurm-client, python3"
    )
    keep: bool = Field(
        True,
        description="keep the built image when the cluster is destroyed, in /var/cache/gpucluster/<name>/ "
        "(./purge-kept.sh removes it): the next up restores it instead of building it again; an image of "
        "another release, package list or build script is never reused",
    )


class NodeConfig(StrictModel):
    """One Slurm compute node, one LXC container."""

    name: Hostname = Field(description="hostname, container name suffix and Slurm NodeName")
    nat_address: IPv4Address = Field(description="static address on the NAT bridge")
    cluster_address: IPv4Address = Field(description="static address on the cluster bridge")
    gpus: int = Field(1, ge=0, le=16, description="GPUs (GRES gpu count) of the node")
    cpus: int = Field(1, ge=1, le=1024, description="CPUs Slurm schedules on the node")


class ControllerConfig(StrictModel):
    """Where slurmctld runs."""

    placement: Literal["container", "host"] = Field(
        "container",
        description="'container': in one of the nodes, as the tutorial does; 'host': on the host",
    )
    node: Hostname | None = Field(
        None, description="node that runs slurmctld when placement is 'container' (default: first)"
    )


class PartitionConfig(StrictModel):
    name: Hostname = Field(description="partition name")
    nodes: list[Hostname] | None = Field(None, description="node names (default: all nodes)")
    default: bool = Field(False, description="the default partition (exactly one)")
    max_time: str = Field("INFINITE", pattern=r"^(INFINITE|UNLIMITED|\d+(-\d+)?(:\d+){0,2})$", description="MaxTime")
    oversubscribe: Literal["NO", "YES", "FORCE", "EXCLUSIVE"] = Field(
        "NO", description="OverSubscribe (replaces the tutorial's removed Shared=)"
    )


class SlurmConfig(StrictModel):
    controller: ControllerConfig = ControllerConfig()
    partitions: list[PartitionConfig] = Field([PartitionConfig(name="gpu", default=True)], min_length=1)


class PortForwardConfig(StrictModel):
    """A host port DNATed to a port of a container."""

    host_port: Port = Field(description="port on the host")
    target: Hostname = Field(description="node name, or the web app's container name")
    port: Port = Field(description="port in the target container")


class WebAppConfig(StrictModel):
    """The GPU web app: its own container, reached through a host port forward."""

    name: Hostname = Field("web", description="container hostname")
    nat_address: IPv4Address = Field(description="static address on the NAT bridge")
    port: Port = Field(8080, description="the port the app listens on AND the forward's target port")
    host_port: Port = Field(7000, description="host port forwarded to the app")
    job_command: list[str] = Field(
        ["nvidia-smi"],
        min_length=1,
        description="GPU job the page's Run button (POST /api/run) runs (argv); a labelled CPU fallback when missing",
    )
    max_concurrent_jobs: int = Field(2, ge=1, le=64, description="jobs running at once")
    job_timeout_s: int = Field(60, ge=1, le=3600, description="a job is killed (with its process group) after this")
    max_connections: int = Field(
        16, ge=2, le=256, description="connections served at once by a fixed pool of threads; more wait"
    )
    run_allowed_cidrs: list[IPv4Network] = Field(
        [], description="source networks whose clients may run jobs (empty: any client that reaches the app)"
    )
    status_interval_s: int = Field(5, ge=1, le=300, description="how often the cluster panel's snapshot is written")

    @model_validator(mode="after")
    def _connections_above_jobs(self) -> "WebAppConfig":
        if self.max_connections <= self.max_concurrent_jobs:
            raise ValueError(
                f"max_connections ({self.max_connections}) must be greater than max_concurrent_jobs "
                f"({self.max_concurrent_jobs}), so a request beyond the job slots can still be told it is busy"
            )
        return self


# What destroy deliberately keeps lives here, one directory per cluster; purge-kept.sh removes it.
KEEP_DIR = "/var/cache/gpucluster"


@dataclass(frozen=True)
class ClusterIdentity:
    """What every component of a cluster derives its names and paths from."""

    name: str
    cluster_dir: str
    munge_socket: str

    @property
    def kept_dir(self) -> str:
        """What destroy keeps of this cluster on purpose (purge-kept.sh removes it)."""
        return f"{KEEP_DIR}/{self.name}"

    def container_name(self, hostname: str) -> str:
        """LXC name: prefixed, so two clusters (or a site's own containers) never collide."""
        return f"{self.name}-{hostname}"

    def forward_tag(self, host_port: int) -> str:
        """The iptables comment on every rule of a forward (delete and verify find them by it)."""
        return f"gpucluster:{self.name}:fwd:{host_port}"


class ClusterConfig(StrictModel):
    """The local GPU Slurm cluster."""

    name: str = Field(
        pattern=r"^[a-z][a-z0-9]{0,9}$",
        description="cluster name: 1-10 lower-case letters/digits, prefix of everything it owns",
    )
    host: HostConfig
    network: NetworkConfig
    gpu: GpuConfig = GpuConfig()
    image: ImageConfig = ImageConfig()
    nodes: list[NodeConfig] = Field(min_length=1, max_length=256)
    slurm: SlurmConfig = SlurmConfig()
    web_app: WebAppConfig | None = None
    forwards: list[PortForwardConfig] = Field([], description="extra host port forwards")

    @model_validator(mode="before")
    @classmethod
    def _stand_in_devices(cls, data):
        """With gpu.stand_in, the GPU devices are the stand-ins (rule_stand_in_gpus refuses others)."""
        gpu = data.get("gpu") if isinstance(data, dict) else None
        stand_in = gpu.get("stand_in") if isinstance(gpu, dict) else None
        count = stand_in.get("count") if isinstance(stand_in, dict) else None
        if type(count) is int and isinstance(data.get("name"), str):
            devices, control_devices = stand_in_devices(f"/run/gpucluster-{data['name']}-dev", count)
            data = {**data, "gpu": {"devices": devices, "control_devices": control_devices, **gpu}}
        return data

    @model_validator(mode="after")
    def _check_rules(self) -> "ClusterConfig":
        problems = [problem for rule in CLUSTER_RULES for problem in rule(self)]
        if problems:
            raise ValueError("\n".join(problems))
        return self

    # Derived views used by the renderers and components.

    @property
    def identity(self) -> ClusterIdentity:
        return ClusterIdentity(name=self.name, cluster_dir=self.cluster_dir, munge_socket=self.munge_socket)

    def container_name(self, hostname: str) -> str:
        return self.identity.container_name(hostname)

    @property
    def node_names(self) -> list[str]:
        return [node.name for node in self.nodes]

    @property
    def hostlist(self) -> str:
        """All nodes in Slurm hostlist form, e.g. c[000-003]."""
        return hostlist.collect_hostlist(self.node_names)

    @property
    def controller_node(self) -> NodeConfig | None:
        if self.slurm.controller.placement == "host":
            return None
        wanted = self.slurm.controller.node or self.nodes[0].name
        return next(node for node in self.nodes if node.name == wanted)

    @property
    def controller_address(self) -> IPv4Address:
        node = self.controller_node
        return node.nat_address if node else self.network.nat_bridge.address.ip

    @property
    def munge_socket(self) -> str:
        """Cluster-private munge socket: the host's own munge (if any) is left alone."""
        return f"/run/gpucluster-{self.name}/munge.socket"

    @property
    def cluster_dir(self) -> str:
        return f"{self.host.state_dir}/{self.name}"

    @property
    def device_dir(self) -> str:
        """The cluster-private directory where device nodes other than /dev/* may live."""
        return f"/run/gpucluster-{self.name}-dev"

    @property
    def all_forwards(self) -> list[PortForwardConfig]:
        web = (
            [PortForwardConfig(host_port=self.web_app.host_port, target=self.web_app.name, port=self.web_app.port)]
            if self.web_app
            else []
        )
        return web + list(self.forwards)

    def forward_tag(self, host_port: int) -> str:
        return self.identity.forward_tag(host_port)

    def target_address(self, target: str) -> IPv4Address:
        """NAT-bridge address of a node or of the web app (a forward's target)."""
        if self.web_app and target == self.web_app.name:
            return self.web_app.nat_address
        return next(node.nat_address for node in self.nodes if node.name == target)

    def gpu_assignment(self) -> dict[str, list[str]]:
        """GPU device paths of each node: shared means every node starts at the first GPU."""
        assignment, next_gpu = {}, 0
        for node in self.nodes:
            start = 0 if self.gpu.share_between_nodes else next_gpu
            assignment[node.name] = self.gpu.devices[start : start + node.gpus]
            next_gpu += node.gpus
        return assignment


def stand_in_devices(device_dir: str, count: int) -> tuple[list[str], list[str]]:
    """The stand-in GPUs' paths (gpu.devices) and their control device (gpu.control_devices)."""
    return [f"{device_dir}/nvidia{i}" for i in range(count)], [f"{device_dir}/nvidiactl"]


# ---- cross-field rules: each yields messages naming the field and what it accepts ----


def _duplicates(values) -> list:
    return [value for value, count in Counter(values).items() if count > 1]


def rule_unique_node_names(c: ClusterConfig) -> Iterator[str]:
    names = c.node_names + ([c.web_app.name] if c.web_app else [])
    for name in _duplicates(names):
        yield f"nodes[].name: {name!r} is used more than once (node and web_app names must be unique)"


def rule_bridges_distinct(c: ClusterConfig) -> Iterator[str]:
    nat, cluster = c.network.nat_bridge, c.network.cluster_bridge
    if nat.name == cluster.name:
        yield f"network.cluster_bridge.name: {cluster.name!r} is also the nat_bridge name; use two bridges"
    if nat.subnet.overlaps(cluster.subnet):
        yield (
            f"network.cluster_bridge.subnet: {cluster.subnet} overlaps the nat_bridge subnet "
            f"{nat.subnet}; use disjoint subnets"
        )
    if nat.address.ip in (nat.subnet.network_address, nat.subnet.broadcast_address):
        yield f"network.nat_bridge.address: {nat.address} is the network or broadcast address of {nat.subnet}"


def _usable(address: IPv4Address, subnet: IPv4Network) -> bool:
    return address in subnet and address not in (subnet.network_address, subnet.broadcast_address)


def _nat_addresses(c: ClusterConfig) -> list[tuple[str, IPv4Address]]:
    pairs = [(f"nodes[{i}].nat_address", n.nat_address) for i, n in enumerate(c.nodes)]
    if c.web_app:
        pairs.append(("web_app.nat_address", c.web_app.nat_address))
    return pairs


def rule_nat_addresses_in_subnet(c: ClusterConfig) -> Iterator[str]:
    bridge = c.network.nat_bridge
    for field, address in _nat_addresses(c):
        if not _usable(address, bridge.subnet):
            yield f"{field}: {address} is not a usable address of the NAT bridge subnet {bridge.subnet}"
        elif address == bridge.address.ip:
            yield f"{field}: {address} is the NAT bridge's own address (gateway); pick another"


def rule_cluster_addresses_in_subnet(c: ClusterConfig) -> Iterator[str]:
    subnet = c.network.cluster_bridge.subnet
    for i, node in enumerate(c.nodes):
        if not _usable(node.cluster_address, subnet):
            yield (
                f"nodes[{i}].cluster_address: {node.cluster_address} is not a usable address of "
                f"the cluster bridge subnet {subnet}"
            )


def rule_unique_addresses(c: ClusterConfig) -> Iterator[str]:
    for address in _duplicates([a for _, a in _nat_addresses(c)]):
        yield f"nodes[].nat_address: {address} is assigned more than once (nodes and web_app)"
    for address in _duplicates([n.cluster_address for n in c.nodes]):
        yield f"nodes[].cluster_address: {address} is assigned more than once"


def rule_gpu_devices(c: ClusterConfig) -> Iterator[str]:
    for path in _duplicates(c.gpu.devices):
        yield f"gpu.devices: {path} is listed more than once"
    basenames = [path.rsplit("/", 1)[-1] for path in c.gpu.devices + c.gpu.control_devices]
    for name in _duplicates(basenames):
        yield f"gpu.devices: two devices would both appear as /dev/{name} in the containers"


def rule_stand_in_gpus(c: ClusterConfig) -> Iterator[str]:
    if c.gpu.stand_in is None:
        return
    devices, control_devices = stand_in_devices(c.device_dir, c.gpu.stand_in.count)
    for field, wanted, given in (
        ("gpu.devices", devices, c.gpu.devices),
        ("gpu.control_devices", control_devices, c.gpu.control_devices),
    ):
        if given != wanted:
            yield (
                f"{field}: cannot be set together with gpu.stand_in, whose stand-ins are the devices "
                f"({', '.join(wanted)}); remove {field}, or remove gpu.stand_in to use real GPUs"
            )


def rule_gpus_match_devices(c: ClusterConfig) -> Iterator[str]:
    declared = c.gpu.stand_in.count if c.gpu.stand_in else len(c.gpu.devices)
    source = "gpu.stand_in.count" if c.gpu.stand_in else "gpu.devices"
    if c.gpu.share_between_nodes:
        for i, node in enumerate(c.nodes):
            if node.gpus > declared:
                yield (f"nodes[{i}].gpus: {node.gpus} GPUs but {source} declares only {declared}")
        return
    wanted = sum(node.gpus for node in c.nodes)
    if wanted > declared:
        more = "raise gpu.stand_in.count" if c.gpu.stand_in else "add devices"
        yield (
            f"nodes[].gpus: the nodes ask for {wanted} GPUs in all but {source} declares "
            f"{declared}; {more}, lower nodes[].gpus, or set gpu.share_between_nodes: true "
            "to share GPUs between nodes"
        )


def rule_controller_node(c: ClusterConfig) -> Iterator[str]:
    controller = c.slurm.controller
    if controller.node is None:
        return
    if controller.placement == "host":
        yield "slurm.controller.node: only valid with placement 'container' (placement is 'host')"
    elif controller.node not in c.node_names:
        yield f"slurm.controller.node: {controller.node!r} is not one of nodes[].name {c.node_names}"


def rule_partitions(c: ClusterConfig) -> Iterator[str]:
    partitions = c.slurm.partitions
    for name in _duplicates([p.name for p in partitions]):
        yield f"slurm.partitions[].name: {name!r} is used more than once"
    defaults = [p.name for p in partitions if p.default]
    if len(defaults) != 1:
        yield f"slurm.partitions[].default: exactly one partition must be default, got {defaults}"
    for i, partition in enumerate(partitions):
        for name in partition.nodes or []:
            if name not in c.node_names:
                yield f"slurm.partitions[{i}].nodes: {name!r} is not one of nodes[].name"


def rule_forwards(c: ClusterConfig) -> Iterator[str]:
    forwards = c.all_forwards
    for port in _duplicates([f.host_port for f in forwards]):
        yield f"forwards[].host_port: host port {port} is forwarded more than once (web_app.host_port included)"
    targets = c.node_names + ([c.web_app.name] if c.web_app else [])
    for i, forward in enumerate(c.forwards):
        if forward.target not in targets:
            yield f"forwards[{i}].target: {forward.target!r} is not a node or the web app ({targets})"


CLUSTER_RULES = (
    rule_unique_node_names,
    rule_bridges_distinct,
    rule_nat_addresses_in_subnet,
    rule_cluster_addresses_in_subnet,
    rule_unique_addresses,
    rule_gpu_devices,
    rule_stand_in_gpus,
    rule_gpus_match_devices,
    rule_controller_node,
    rule_partitions,
    rule_forwards,
)
