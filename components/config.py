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


class NodeConfig(StrictModel):
    """One Slurm compute node, one LXC container."""

    name: Hostname = Field(description="hostname, container name suffix and Slurm NodeName")
    nat_address: IPv4Address = Field(description="static address on the NAT bridge")
    cluster_address: IPv4Address = Field(description="static address on the cluster bridge")
    gpus: int = Field(1, ge=0, le=16, description="GPUs (GRES gpu count) of the node")
    cpus: int = Field(1, ge=1, le=1024, description="CPUs Slurm schedules on the node")
    host: Hostname | None = Field(None, description="hosts[].name of the host it runs on (needed with several hosts)")


class ControllerConfig(StrictModel):
    """Where slurmctld runs."""

    placement: Literal["container", "host"] = Field(
        "container",
        description="'container': in one of the nodes, as the tutorial does; 'host': on the host",
    )
    node: Hostname | None = Field(
        None, description="node that runs slurmctld when placement is 'container' (default: first)"
    )
    host: Hostname | None = Field(
        None, description="hosts[].name of the host that runs slurmctld when placement is 'host' (default: first)"
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
        description="GPU job GET / runs (argv); a labelled CPU fallback runs when it is missing",
    )
    max_concurrent_jobs: int = Field(2, ge=1, le=64, description="jobs running at once")
    job_timeout_s: int = Field(60, ge=1, le=3600, description="a job is killed after this")
    host: Hostname | None = Field(None, description="hosts[].name of the host it runs on (needed with several hosts)")


LOCAL_HOST = "local"

# An SSH public key as OpenSSH prints it (`ssh-keyscan`, /etc/ssh/ssh_host_*_key.pub), comment dropped.
HOST_KEY_PATTERN = r"^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)) [A-Za-z0-9+/]+={0,3}$"


class LocalConnection(StrictModel):
    """Commands run on the machine that runs `pulumi up`."""

    kind: Literal["local"] = "local"


class SshEndpoint(StrictModel):
    """An SSH server, its host key pinned: a host presenting another key is refused."""

    address: str = Field(
        pattern=r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,252})$", description="IPv4 address or DNS name of the SSH server"
    )
    port: Port = Field(22, description="SSH port")
    user: str = Field("root", pattern=r"^[a-z_][a-z0-9_-]{0,31}$", description="login user (root: scripts need it)")
    host_key: str = Field(
        pattern=HOST_KEY_PATTERN,
        description="the server's public host key, e.g. the first two fields of /etc/ssh/ssh_host_ed25519_key.pub",
    )


class SshConnection(SshEndpoint):
    """Commands run over SSH (pulumi-command remote.Command)."""

    kind: Literal["ssh"]
    private_key_secret: str = Field(
        pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,63}$",
        description="name of the stack's secret config key holding the private key "
        "(`pulumi config set --secret NAME < key`); it never appears in the stack file",
    )
    bastion: SshEndpoint | None = Field(None, description="jump host (same private key) when the host is not reachable")
    dial_error_limit: int = Field(10, ge=-1, le=1000, description="failed dials before giving up (-1: forever)")


class ClusterHostConfig(StrictModel):
    """One GPU host of a multi-host cluster: how it is reached and what it carries."""

    name: Hostname = Field(description="host name: in resource names and nodes[].host")
    connection: LocalConnection | SshConnection = Field(
        LocalConnection(), discriminator="kind", description="{kind: local} (default), or {kind: ssh, ...}"
    )
    address: IPv4Address | None = Field(
        None, description="address the other hosts reach this host at: their route to its container subnets"
    )
    hostname: Hostname | None = Field(
        None, description="the machine's short hostname (`hostname -s`): needed where slurmctld runs on the host"
    )
    retired: bool = Field(
        False,
        description="the host is gone for good: its commands are dropped from the program (and the "
        "state) without running, as nothing can reach it; move or remove its nodes first",
    )
    state_dir: SafePath = Field("/var/lib/gpucluster", description="per-cluster state on this host")
    run_dir: SafePath = Field("/run", description="runtime directory (sockets, pid files) on this host")
    lxc_dir: SafePath = Field("/var/lib/lxc", description="LXC path (lxc-* -P) of this host's containers")
    shared_dir: SafePath = Field(description="directory bind-mounted into this host's nodes (per host)")
    install_packages: bool = Field(True, description="install the Debian packages the host needs (apt-get)")
    network: NetworkConfig
    gpu: GpuConfig = GpuConfig()

    @property
    def is_ssh(self) -> bool:
        return isinstance(self.connection, SshConnection)


@dataclass(frozen=True)
class ClusterIdentity:
    """What every component of a cluster derives its names and paths from."""

    name: str
    cluster_dir: str
    munge_socket: str

    def container_name(self, hostname: str) -> str:
        """LXC name: prefixed, so two clusters (or a site's own containers) never collide."""
        return f"{self.name}-{hostname}"

    def forward_tag(self, host_port: int) -> str:
        """The iptables comment on every rule of a forward (delete and verify find them by it)."""
        return f"gpucluster:{self.name}:fwd:{host_port}"


class ClusterConfig(StrictModel):
    """The GPU Slurm cluster: on one host (`host`, `network`, `gpu`) or on several (`hosts`)."""

    name: str = Field(
        pattern=r"^[a-z][a-z0-9]{0,9}$",
        description="cluster name: 1-10 lower-case letters/digits, prefix of everything it owns",
    )
    host: HostConfig | None = Field(None, description="the one local host (without `hosts`)")
    network: NetworkConfig | None = Field(None, description="the one local host's bridges (without `hosts`)")
    gpu: GpuConfig = GpuConfig()
    hosts: list[ClusterHostConfig] | None = Field(
        None,
        min_length=1,
        max_length=64,
        description="several hosts, each with its own bridges, GPUs and directories; replaces host/network/gpu",
    )
    image: ImageConfig = ImageConfig()
    nodes: list[NodeConfig] = Field(min_length=1, max_length=256)
    slurm: SlurmConfig = SlurmConfig()
    web_app: WebAppConfig | None = None
    forwards: list[PortForwardConfig] = Field([], description="extra host port forwards")

    @model_validator(mode="before")
    @classmethod
    def _stand_in_devices(cls, data):
        """With gpu.stand_in, the GPU devices are the stand-ins (rule_stand_in_gpus refuses others),
        in the cluster's device directory under the host's run directory."""
        if not isinstance(data, dict) or not isinstance(data.get("name"), str):
            return data

        def filled(gpu, run_dir):
            stand_in = gpu.get("stand_in") if isinstance(gpu, dict) else None
            count = stand_in.get("count") if isinstance(stand_in, dict) else None
            if type(count) is not int or not isinstance(run_dir, str):
                return gpu
            devices, control_devices = stand_in_devices(device_dir_of(run_dir, data["name"]), count)
            return {"devices": devices, "control_devices": control_devices, **gpu}

        if "gpu" in data:
            data = {**data, "gpu": filled(data["gpu"], "/run")}
        if isinstance(data.get("hosts"), list):
            data = {
                **data,
                "hosts": [
                    {**host, "gpu": filled(host["gpu"], host.get("run_dir", "/run"))}
                    if isinstance(host, dict) and "gpu" in host
                    else host
                    for host in data["hosts"]
                ],
            }
        return data

    @model_validator(mode="after")
    def _check_rules(self) -> "ClusterConfig":
        problems = list(rule_host_layout(self))
        if not problems:
            rules = CLUSTER_RULES if self.hosts is None else MULTI_HOST_RULES
            problems = [problem for rule in rules for problem in rule(self)]
        if problems:
            raise ValueError("\n".join(problems))
        return self

    # ---- hosts ----

    @property
    def multi_host(self) -> bool:
        """Whether the stack lists `hosts` (resource names then carry the host's name)."""
        return self.hosts is not None

    @property
    def cluster_hosts(self) -> list["ClusterHostConfig"]:
        """Every host; a single-host stack is one local host built from host/network/gpu."""
        if self.hosts is not None:
            return list(self.hosts)
        return [
            ClusterHostConfig(
                name=LOCAL_HOST,
                state_dir=self.host.state_dir,
                shared_dir=self.host.shared_dir,
                install_packages=self.host.install_packages,
                network=self.network,
                gpu=self.gpu,
            )
        ]

    @property
    def active_hosts(self) -> list["ClusterHostConfig"]:
        """Hosts that carry commands: a retired host's commands are dropped from the program."""
        return [h for h in self.cluster_hosts if not h.retired]

    def host_named(self, name: str) -> "ClusterHostConfig":
        return next(h for h in self.cluster_hosts if h.name == name)

    def node_host(self, node: "NodeConfig") -> "ClusterHostConfig":
        """The host a node (or the web app) runs on; one-host stacks need not name it."""
        return self.host_named(node.host) if node.host else self.cluster_hosts[0]

    def for_host(self, host: "ClusterHostConfig") -> "ClusterConfig":
        """The cluster as one host sees it: its bridges, GPUs, directories, nodes, app and forwards.

        Per-host components (preflight, bridges, image, containers) take this view, so they
        are the same code for one host or many. A one-host stack's view is the stack itself.
        """
        if not self.multi_host:
            return self
        web = self.web_app if self.web_app and self.node_host(self.web_app).name == host.name else None
        nodes = [n for n in self.nodes if self.node_host(n).name == host.name]
        on_host = {n.name for n in nodes} | ({web.name} if web else set())
        return self.model_copy(
            update={
                "host": HostConfig(
                    state_dir=host.state_dir, shared_dir=host.shared_dir, install_packages=host.install_packages
                ),
                "network": host.network,
                "gpu": host.gpu,
                "hosts": None,
                "nodes": nodes,
                "web_app": web,
                "forwards": [f for f in self.forwards if f.target in on_host],
            }
        )

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
    def controller_host(self) -> "ClusterHostConfig":
        """Where slurmctld runs: the controller node's host, or `slurm.controller.host`."""
        node = self.controller_node
        if node:
            return self.node_host(node)
        wanted = self.slurm.controller.host
        return self.host_named(wanted) if wanted else self.cluster_hosts[0]

    @property
    def controller_address(self) -> IPv4Address:
        node = self.controller_node
        return node.nat_address if node else self.controller_host.network.nat_bridge.address.ip

    @property
    def munge_socket(self) -> str:
        """Cluster-private munge socket: the host's own munge (if any) is left alone."""
        run_dir = self.controller_host.run_dir if self.multi_host else "/run"
        return f"{run_dir}/gpucluster-{self.name}/munge.socket"

    def host_munge_socket(self, host: "ClusterHostConfig") -> str:
        """The socket of the cluster's munged on a host (for its Slurm client)."""
        return f"{host.run_dir}/gpucluster-{self.name}/munge.socket"

    def host_cluster_dir(self, host: "ClusterHostConfig") -> str:
        return f"{host.state_dir}/{self.name}"

    def host_identity(self, host: "ClusterHostConfig") -> ClusterIdentity:
        """The cluster as one host's commands name it: that host's cluster directory, and the
        munge socket of the nodes and the controller (the same path in every container)."""
        return ClusterIdentity(name=self.name, cluster_dir=self.host_cluster_dir(host), munge_socket=self.munge_socket)

    def routes_of(self, host: "ClusterHostConfig") -> list[tuple[IPv4Network, IPv4Address]]:
        """(subnet, via) for each other active host's NAT subnet: where a host routes the
        other hosts' containers."""
        return [
            (other.network.nat_bridge.subnet, other.address)
            for other in self.active_hosts
            if other.name != host.name and other.address is not None
        ]

    @property
    def cluster_dir(self) -> str:
        """The cluster's state directory on the controller's host (its own host in a view)."""
        state_dir = self.host.state_dir if self.host else self.controller_host.state_dir
        return f"{state_dir}/{self.name}"

    @property
    def device_dir(self) -> str:
        """The cluster-private directory where device nodes other than /dev/* may live."""
        return device_dir_of("/run", self.name)

    def host_device_dir(self, host: "ClusterHostConfig") -> str:
        """The cluster's device directory on a host (under the host's run directory)."""
        return device_dir_of(host.run_dir, self.name)

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
        """GPU device paths of each node, from its own host's devices: shared means every
        node starts at the host's first GPU."""
        assignment, next_gpu = {}, Counter()
        for node in self.nodes:
            host = self.node_host(node) if self.multi_host else None
            gpu = host.gpu if host else self.gpu
            key = host.name if host else ""
            start = 0 if gpu.share_between_nodes else next_gpu[key]
            assignment[node.name] = gpu.devices[start : start + node.gpus]
            next_gpu[key] += node.gpus
        return assignment


def device_dir_of(run_dir: str, cluster: str) -> str:
    return f"{run_dir}/gpucluster-{cluster}-dev"


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


def _hosts(c: ClusterConfig) -> Iterator[tuple[str, ClusterHostConfig, list[tuple[int, NodeConfig]]]]:
    """Each host with the prefix of its fields ('' for a one-host stack) and its nodes (with index)."""
    for i, host in enumerate(c.cluster_hosts):
        prefix = f"hosts[{i}]." if c.multi_host else ""
        nodes = [(j, n) for j, n in enumerate(c.nodes) if c.node_host(n).name == host.name]
        yield prefix, host, nodes


def rule_bridges_distinct(c: ClusterConfig) -> Iterator[str]:
    for prefix, host, _ in _hosts(c):
        nat, cluster = host.network.nat_bridge, host.network.cluster_bridge
        if nat.name == cluster.name:
            yield f"{prefix}network.cluster_bridge.name: {cluster.name!r} is also the nat_bridge name; use two bridges"
        if nat.subnet.overlaps(cluster.subnet):
            yield (
                f"{prefix}network.cluster_bridge.subnet: {cluster.subnet} overlaps the nat_bridge subnet "
                f"{nat.subnet}; use disjoint subnets"
            )
        if nat.address.ip in (nat.subnet.network_address, nat.subnet.broadcast_address):
            yield (
                f"{prefix}network.nat_bridge.address: {nat.address} is the network or broadcast address of {nat.subnet}"
            )


def _usable(address: IPv4Address, subnet: IPv4Network) -> bool:
    return address in subnet and address not in (subnet.network_address, subnet.broadcast_address)


def _nat_addresses(c: ClusterConfig) -> list[tuple[str, IPv4Address, ClusterHostConfig]]:
    pairs = [(f"nodes[{i}].nat_address", n.nat_address, c.node_host(n)) for i, n in enumerate(c.nodes)]
    if c.web_app:
        pairs.append(("web_app.nat_address", c.web_app.nat_address, c.node_host(c.web_app)))
    return pairs


def rule_nat_addresses_in_subnet(c: ClusterConfig) -> Iterator[str]:
    for field, address, host in _nat_addresses(c):
        bridge = host.network.nat_bridge
        where = f" of host {host.name!r}" if c.multi_host else ""
        if not _usable(address, bridge.subnet):
            yield f"{field}: {address} is not a usable address of the NAT bridge subnet {bridge.subnet}{where}"
        elif address == bridge.address.ip:
            yield f"{field}: {address} is the NAT bridge's own address (gateway); pick another"


def rule_cluster_addresses_in_subnet(c: ClusterConfig) -> Iterator[str]:
    for i, node in enumerate(c.nodes):
        host = c.node_host(node)
        subnet = host.network.cluster_bridge.subnet
        where = f" of host {host.name!r}" if c.multi_host else ""
        if not _usable(node.cluster_address, subnet):
            yield (
                f"nodes[{i}].cluster_address: {node.cluster_address} is not a usable address of "
                f"the cluster bridge subnet {subnet}{where}"
            )


def rule_unique_addresses(c: ClusterConfig) -> Iterator[str]:
    for address in _duplicates([a for _, a, _ in _nat_addresses(c)]):
        yield f"nodes[].nat_address: {address} is assigned more than once (nodes and web_app)"
    for address in _duplicates([n.cluster_address for n in c.nodes]):
        yield f"nodes[].cluster_address: {address} is assigned more than once"


def rule_gpu_devices(c: ClusterConfig) -> Iterator[str]:
    for prefix, host, _ in _hosts(c):
        for path in _duplicates(host.gpu.devices):
            yield f"{prefix}gpu.devices: {path} is listed more than once"
        basenames = [path.rsplit("/", 1)[-1] for path in host.gpu.devices + host.gpu.control_devices]
        for name in _duplicates(basenames):
            yield f"{prefix}gpu.devices: two devices would both appear as /dev/{name} in the containers"


def rule_stand_in_gpus(c: ClusterConfig) -> Iterator[str]:
    for prefix, host, _ in _hosts(c):
        gpu = host.gpu
        if gpu.stand_in is None:
            continue
        devices, control_devices = stand_in_devices(c.host_device_dir(host), gpu.stand_in.count)
        for field, wanted, given in (
            (f"{prefix}gpu.devices", devices, gpu.devices),
            (f"{prefix}gpu.control_devices", control_devices, gpu.control_devices),
        ):
            if given != wanted:
                yield (
                    f"{field}: cannot be set together with {prefix}gpu.stand_in, whose stand-ins are the "
                    f"devices ({', '.join(wanted)}); remove {field}, or remove {prefix}gpu.stand_in to use real GPUs"
                )


def rule_gpus_match_devices(c: ClusterConfig) -> Iterator[str]:
    """A node's GPUs come from its own host's gpu.devices (or its stand-ins)."""
    for prefix, host, nodes in _hosts(c):
        gpu = host.gpu
        declared = gpu.stand_in.count if gpu.stand_in else len(gpu.devices)
        source = f"{prefix}gpu.stand_in.count" if gpu.stand_in else f"{prefix}gpu.devices"
        if gpu.share_between_nodes:
            for i, node in nodes:
                if node.gpus > declared:
                    yield (f"nodes[{i}].gpus: {node.gpus} GPUs but {source} declares only {declared}")
            continue
        wanted = sum(node.gpus for _, node in nodes)
        if wanted > declared:
            on = f" on host {host.name!r}" if c.multi_host else ""
            more = f"raise {prefix}gpu.stand_in.count" if gpu.stand_in else "add devices"
            yield (
                f"nodes[].gpus: the nodes{on} ask for {wanted} GPUs in all but {source} declares "
                f"{declared}; {more}, lower nodes[].gpus, or set {prefix}gpu.share_between_nodes: true "
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


def rule_host_layout(c: ClusterConfig) -> Iterator[str]:
    """Either one host (host + network [+ gpu]) or `hosts`, and every name given resolves."""
    if c.hosts is None:
        if c.host is None:
            yield "host: required (or list several hosts under `hosts`)"
        if c.network is None:
            yield "network: required (or list several hosts under `hosts`)"
        for field, value in _host_references(c):
            yield f"{field}: {value!r} names a host, but this stack has no `hosts` list"
        return
    for field, per_host in (("host", "state_dir, shared_dir"), ("network", "network"), ("gpu", "gpu")):
        if field in c.model_fields_set:
            yield f"{field}: not allowed with `hosts`; set it per host (hosts[].{per_host})"
    names = [h.name for h in c.hosts]
    for name in _duplicates(names):
        yield f"hosts[].name: {name!r} is used more than once"
    for field, value in _host_references(c):
        if value not in names:
            yield f"{field}: {value!r} is not one of hosts[].name {names}"
    if len(c.hosts) > 1:
        for i, node in enumerate(c.nodes):
            if node.host is None:
                yield f"nodes[{i}].host: required with several hosts (one of {names})"
        if c.web_app and c.web_app.host is None:
            yield f"web_app.host: required with several hosts (one of {names})"


def _host_references(c: ClusterConfig) -> Iterator[tuple[str, str]]:
    for i, node in enumerate(c.nodes):
        if node.host is not None:
            yield f"nodes[{i}].host", node.host
    if c.web_app and c.web_app.host is not None:
        yield "web_app.host", c.web_app.host
    if c.slurm.controller.host is not None:
        yield "slurm.controller.host", c.slurm.controller.host


def rule_hosts(c: ClusterConfig) -> Iterator[str]:
    """Hosts are told apart by name, subnets and the address the others route through."""
    hosts = c.cluster_hosts
    node_names = set(c.node_names) | ({c.web_app.name} if c.web_app else set())
    for i, host in enumerate(hosts):
        if host.name in node_names:
            yield f"hosts[{i}].name: {host.name!r} is also a node or web_app name; names must be unique"
        if len(hosts) > 1 and host.address is None:
            yield f"hosts[{i}].address: required with several hosts (the other hosts route its subnets through it)"
    for (i, a), (j, b) in ((x, y) for x in enumerate(hosts) for y in enumerate(hosts) if x[0] < y[0]):
        for field_a, net_a in _subnets(a):
            for field_b, net_b in _subnets(b):
                if net_a.overlaps(net_b):
                    yield (
                        f"hosts[{j}].{field_b}: {net_b} overlaps hosts[{i}].{field_a} {net_a}; "
                        "the container subnets of different hosts must be disjoint (they are routed between hosts)"
                    )
    for address in _duplicates([h.address for h in hosts if h.address]):
        yield f"hosts[].address: {address} is given to more than one host"
    for (i, a), (j, b) in ((x, y) for x in enumerate(hosts) for y in enumerate(hosts) if x[0] < y[0]):
        same_machine = not a.is_ssh and not b.is_ssh
        if same_machine:
            yield f"hosts[{j}].connection: hosts[{i}] is already the local host; only one host can be local"
        for field in ("state_dir", "run_dir", "lxc_dir"):
            if _same_place(a, b) and getattr(a, field) == getattr(b, field):
                yield (
                    f"hosts[{j}].{field}: {getattr(b, field)} is also hosts[{i}].{field} on the same machine "
                    f"({a.name}, {b.name}); give each host its own"
                )
    controller = c.slurm.controller
    if controller.placement == "host" and controller.node is None and c.controller_host.hostname is None:
        where = next(i for i, h in enumerate(hosts) if h.name == c.controller_host.name)
        yield (
            f"hosts[{where}].hostname: required, slurmctld runs on this host and Slurm compares "
            "SlurmctldHost with the machine's hostname (`hostname -s`)"
        )
    if controller.host is not None and controller.placement != "host":
        yield "slurm.controller.host: only valid with placement 'host' (the container's host is its node's)"
    if (controller.node is None or controller.node in c.node_names) and c.controller_host.retired:
        yield f"slurm.controller: runs on host {c.controller_host.name!r}, which is retired; move it first"
    for i, node in enumerate(c.nodes):
        if c.node_host(node).retired:
            yield f"nodes[{i}].host: {node.host!r} is retired; move or remove the node first"
    if c.web_app and c.node_host(c.web_app).retired:
        yield f"web_app.host: {c.web_app.host!r} is retired; move or remove the web app first"


def _subnets(host: ClusterHostConfig) -> list[tuple[str, IPv4Network]]:
    return [
        ("network.nat_bridge.address", host.network.nat_bridge.subnet),
        ("network.cluster_bridge.subnet", host.network.cluster_bridge.subnet),
    ]


def _same_place(a: ClusterHostConfig, b: ClusterHostConfig) -> bool:
    """Two hosts reached at the same SSH address (and a local one) may be one machine."""
    addr_a = a.connection.address if a.is_ssh else None
    addr_b = b.connection.address if b.is_ssh else None
    return addr_a == addr_b or (addr_a or addr_b) in {"127.0.0.1", "localhost"}


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

MULTI_HOST_RULES = (rule_hosts, *CLUSTER_RULES)
