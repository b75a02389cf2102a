"""Typed config of the local GPU Slurm cluster, read from the stack's `gpu-cluster:cluster` key.

Each area's models live beside its components (components/<area>/config.py); this module
composes them into a host (ClusterHostConfig) and the cluster (ClusterConfig). Field rules
(types, ranges, patterns) live on the fields; rules that relate several fields are small
named functions in CLUSTER_RULES, all run together so one `pulumi up` reports every problem
at once, each naming the field and what it accepts.
"""

import functools
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network

from pydantic import Field, model_validator

from components.app.config import WebAppConfig
from components.aws.config import AwsConfig, Ec2Connection
from components.aws.prices import PRICES_DATE, hourly_price
from components.burst.config import BurstConfig, rule_burst_shared_fs
from components.config_rules_beside_errors import UNDERIVED, rebuilding, valid_as
from components.config_types import Address, Hostname, SafePath, StrictBool, StrictModel
from components.host.config import (
    GpuHourPrice,
    HostConfig,
    LocalConnection,
    SshConnection,
    UserConfig,
    is_system_account,
    same_machine_key,
)
from components.lxc.config import STAND_IN_MAX, GpuConfig, ImageConfig, device_dir_of, stand_in_devices
from components.metrics.config import MetricsConfig, rule_metrics_ports
from components.network.config import NetworkConfig, PortForwardConfig
from components.sharedfs.config import SharedFsConfig, rule_shared_fs
from components.slurm.config import (
    SACCTMGR_KEYWORDS,
    SLURM_RESERVED_NODE_NAMES,
    SLURM_RESERVED_PARTITION_NAMES,
    AccountingConfig,
    NodeConfig,
    SlurmConfig,
    slurm_hostlist,
)

# Containers the program names itself (`<cluster>-<name>`): no node or web app may take them.
INTERNAL_CONTAINER_NAMES = frozenset({"image"})

# Host ports a forward may not take: a DNAT rule on them would hijack the host's SSH, DNS,
# or Slurm traffic (slurmctld 6817, slurmd 6818, slurmdbd 6819; a host controller listens on
# the NAT bridge). Every port below 1024 is the host's, so forwards use 1024 and up.
FIRST_FORWARD_PORT = 1024
SLURM_PORTS = frozenset({6817, 6818, 6819})

# Host directories the cluster never mounts into a container, keeps state in, or shares:
# these exact paths...
SYSTEM_DIRS = frozenset(
    {
        "/",
        "/bin",
        "/boot",
        "/dev",
        "/etc",
        "/home",
        "/lib",
        "/lib32",
        "/lib64",
        "/libx32",
        "/media",
        "/mnt",
        "/opt",
        "/proc",
        "/root",
        "/run",
        "/sbin",
        "/srv",
        "/sys",
        "/tmp",
        "/usr",
        "/usr/bin",
        "/usr/include",
        "/usr/lib",
        "/usr/lib32",
        "/usr/lib64",
        "/usr/libexec",
        "/usr/local",
        "/usr/local/bin",
        "/usr/local/lib",
        "/usr/local/sbin",
        "/usr/sbin",
        "/usr/share",
        "/usr/src",
        "/var",
        "/var/cache",
        "/var/lib",
        "/var/log",
        "/var/run",
        "/var/spool",
        "/var/tmp",
    }
)
# ...and nothing inside these trees: the kernel's, the host's configuration, LXC's containers.
KERNEL_AND_CONFIG_TREES = ("/proc", "/sys", "/dev", "/boot", "/etc", "/run", "/var/lib/lxc", "/var/cache/lxc")
# The cluster's state (the munge key) lives only in root-owned, non-world-writable trees.
STATE_FORBIDDEN_TREES = (*KERNEL_AND_CONFIG_TREES, "/tmp", "/var/tmp", "/usr", "/bin", "/sbin", "/lib", "/lib64")
# Where anyone may write, or a user owns the place: never the cluster's runtime directory (a
# socket planted there would answer for munge) nor its containers' (a planted container config
# would run its hooks as root).
USER_WRITABLE_TREES = (
    "/tmp",
    "/var/tmp",
    "/dev/shm",
    "/run/lock",
    "/run/shm",
    "/run/user",
    "/var/lock",
    "/var/crash",
    "/home",
)
# The runtime and container directories: the system's own (the defaults) or one of the cluster's
# that passes the state directory's checks; a runtime directory may also be below /run.
RUN_DIR_FORBIDDEN_TREES = (*(t for t in STATE_FORBIDDEN_TREES if t != "/run"), *USER_WRITABLE_TREES)
LXC_DIR_FORBIDDEN_TREES = (*STATE_FORBIDDEN_TREES, *USER_WRITABLE_TREES)
# Driver files are bound read-only into containers: never secrets or per-host state.
DRIVER_FILE_FORBIDDEN_TREES = (*KERNEL_AND_CONFIG_TREES, "/root", "/home", "/var/lib", "/var/log", "/tmp")


def is_within(path: str, tree: str) -> bool:
    """`path` is `tree` or below it (both normalised absolute paths)."""
    return path == tree or path.startswith(tree.rstrip("/") + "/")


def _related(path: str, other: str) -> bool:
    """One of the two paths contains the other (or they are equal)."""
    return is_within(path, other) or is_within(other, path)


# What destroy deliberately keeps lives here, one directory per cluster; purge-kept.sh removes it.
KEEP_DIR = "/var/cache/gpucluster"

# The name of the one host of a stack without `hosts`.
LOCAL_HOST = "local"


class ClusterHostConfig(StrictModel):
    """One GPU host of a multi-host cluster: how it is reached and what it carries."""

    name: Hostname = Field(description="host name: in resource names and nodes[].host")
    connection: LocalConnection | SshConnection | Ec2Connection = Field(
        LocalConnection(),
        discriminator="kind",
        description="{kind: local} (default), {kind: ssh, ...}, or {kind: ec2, ...} (an instance the program makes)",
    )
    address: Address | None = Field(
        None, description="address the other hosts reach this host at: their route to its container subnets"
    )
    hostname: Hostname | None = Field(
        None, description="the machine's short hostname (`hostname -s`): needed where slurmctld runs on the host"
    )
    retired: StrictBool = Field(
        False,
        description="the host is gone for good (SSH hosts only): first set this alone, and `pulumi up` "
        "runs nothing on it but marks its commands to be dropped from the state without running; "
        "then remove the host and its nodes",
    )
    state_dir: SafePath = Field("/var/lib/gpucluster", description="per-cluster state on this host")
    run_dir: SafePath = Field("/run", description="runtime directory (sockets, pid files) on this host")
    lxc_dir: SafePath = Field("/var/lib/lxc", description="LXC path (lxc-* -P) of this host's containers")
    shared_dir: SafePath = Field(description="directory bind-mounted into this host's nodes (per host)")
    install_packages: StrictBool = Field(True, description="install the Debian packages the host needs (apt-get)")
    gpu_hour_price: GpuHourPrice = 0.0
    network: NetworkConfig
    gpu: GpuConfig = GpuConfig()

    @property
    def is_ssh(self) -> bool:
        """Reached over SSH: a configured machine, or an EC2 instance of the stack."""
        return isinstance(self.connection, (SshConnection, Ec2Connection))

    @property
    def is_ec2(self) -> bool:
        return isinstance(self.connection, Ec2Connection)


@dataclass(frozen=True)
class ClusterIdentity:
    """What every component of a cluster derives its names and paths from."""

    name: str
    cluster_dir: str
    munge_socket: str
    host: str | None = None
    """The host's name in a cluster of several hosts (its kept files have their own folder)."""

    @property
    def status_dir(self) -> str:
        """Host directory of the cluster snapshot: written on the host (the boot unit restarts
        its writer), mounted read-only in the web app."""
        return f"{self.cluster_dir}/status"

    @property
    def kept_dir(self) -> str:
        """What destroy keeps of this cluster on purpose (purge-kept.sh removes it); per host
        where several hosts may share a filesystem."""
        return f"{KEEP_DIR}/{self.name}" + (f"/{self.host}" if self.host else "")

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
    users: list[UserConfig] = Field(
        [], description="people using the cluster: created on the host and in every container"
    )
    accounting: AccountingConfig | None = Field(
        None, description="job accounting (slurmdbd on MariaDB), accounts and GPU limits; none: no accounting"
    )
    metrics: MetricsConfig | None = Field(
        None,
        description="Prometheus, exporters and alert rules in a container on the controller's host; none: no metrics",
    )
    aws: AwsConfig | None = Field(None, description="where the EC2 hosts (hosts[].connection.kind: ec2) are made")
    burst: BurstConfig | None = Field(
        None, description="partitions of EC2 instances Slurm starts on demand and stops when idle; none: no burst"
    )
    shared_fs: SharedFsConfig | None = Field(
        None,
        description="one NFS export every host mounts at its shared_dir (with `hosts`): an existing one "
        "(kind: nfs) or one the program serves from a host (kind: served); none: shared_dir is per host",
    )

    @model_validator(mode="before")
    @classmethod
    def _stand_in_devices(cls, data):
        """With gpu.stand_in, the GPU devices are the stand-ins (rule_stand_in_gpus refuses others),
        in the cluster's device directory under the host's run directory."""
        if not isinstance(data, dict) or not (isinstance(data.get("name"), str) or rebuilding()):
            return data

        def filled(gpu, run_dir):
            stand_in = gpu.get("stand_in") if isinstance(gpu, dict) else None
            count = stand_in.get("count") if isinstance(stand_in, dict) else None
            # Out of range, the field check names it; the list is built only for a count in range.
            valid = (
                type(count) is int
                and 1 <= count <= STAND_IN_MAX
                and isinstance(run_dir, str)
                and isinstance(data.get("name"), str)
            )
            if valid and rebuilding():  # rebuilt around invalid fields: derived from valid ones only
                valid = valid_as(ClusterConfig, "name", data["name"]) and valid_as(
                    ClusterHostConfig, "run_dir", run_dir
                )
            if not valid:
                underived = {"devices": UNDERIVED, "control_devices": UNDERIVED}
                return {**underived, **gpu} if rebuilding() and stand_in is not None else gpu
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
        problems = self.rule_problems(lambda rule: list(rule()))
        if problems:
            raise ValueError("\n".join(problems))
        return self

    def rule_problems(self, run) -> list[str]:
        """Every cross-field rule's messages; `run(check)` gives one rule's (None: not checked,
        components/config_rules_beside_errors.py). The rules read the host layout it checks first."""
        layout = run(lambda: rule_host_layout(self))
        if layout is None or layout:  # not checked, or wrong: the other rules need it right
            return layout or []
        rules = CLUSTER_RULES if self.hosts is None else MULTI_HOST_RULES
        return [problem for rule in rules for problem in run(functools.partial(rule, self)) or []]

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
                gpu_hour_price=self.host.gpu_hour_price,
                network=self.network,
                gpu=self.gpu,
            )
        ]

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
                    state_dir=host.state_dir,
                    shared_dir=host.shared_dir,
                    install_packages=host.install_packages,
                    gpu_hour_price=host.gpu_hour_price,
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
    def metrics_enabled(self) -> bool:
        return self.metrics is not None and self.metrics.enabled

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
        return slurm_hostlist(self.node_names)

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
    def accounting_host(self) -> "ClusterHostConfig":
        """Where the accounting database's container runs: `accounting.host`, or the controller's host."""
        wanted = self.accounting.host if self.accounting else None
        return self.host_named(wanted) if wanted else self.controller_host

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
        return ClusterIdentity(
            name=self.name,
            cluster_dir=self.host_cluster_dir(host),
            munge_socket=self.munge_socket,
            host=host.name if self.multi_host else None,
        )

    def routes_of(self, host: "ClusterHostConfig") -> list[tuple[IPv4Network, IPv4Address]]:
        """(subnet, via) for each other host's NAT subnet: where a host routes the
        other hosts' containers; and on the controller's host, the burst VPC via the VPN router
        (routed, never masqueraded: slurmctld connects back to the address a node registers from)."""
        routes = [
            (other.network.nat_bridge.subnet, other.address)
            for other in self.cluster_hosts
            if other.name != host.name and other.address is not None
        ]
        if self.burst is not None and host.name == self.controller_host.name:
            routes.append((self.burst.vpc_cidr, self.burst.vpn.router_address))
        return routes

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
            [
                PortForwardConfig(
                    host_port=self.web_app.host_port,
                    target=self.web_app.name,
                    port=self.web_app.port,
                    allowed_sources=self.web_app.allowed_sources,
                )
            ]
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

    @property
    def node_gpu_pool(self) -> list[str]:
        """The devices dealt to nodes: all but the web app's own (unless it shares them)."""
        return self.host_gpu_pool(self.cluster_hosts[0])

    def host_gpu_pool(self, host: "ClusterHostConfig") -> list[str]:
        """The devices of a host dealt to its nodes: all but the web app's own there (unless it
        shares them)."""
        web = self.web_app if self.web_app and self.node_host(self.web_app).name == host.name else None
        reserved = set(web.gpus) if web and not web.share_gpus else set()
        return [device for device in host.gpu.devices if device not in reserved]

    def gpu_assignment(self) -> dict[str, list[str]]:
        """GPU device paths of each node, from its own host's devices (less the web app's own):
        shared means every node starts at the first GPU of its host's pool."""
        assignment, next_gpu = {}, Counter()
        for node in self.nodes:
            host = self.node_host(node)
            pool = self.host_gpu_pool(host)
            start = 0 if host.gpu.share_between_nodes else next_gpu[host.name]
            assignment[node.name] = pool[start : start + node.gpus]
            next_gpu[host.name] += node.gpus
        return assignment


# ---- cross-field rules: each yields messages naming the field and what it accepts ----


def _duplicates(values) -> list:
    return [value for value, count in Counter(values).items() if count > 1]


def rule_unique_node_names(c: ClusterConfig) -> Iterator[str]:
    names = c.node_names + ([c.web_app.name] if c.web_app else [])
    for name in _duplicates(names):
        yield f"nodes[].name: {name!r} is used more than once (node, web_app and accounting names must be unique)"
    if "image" in names:
        yield "nodes[].name: 'image' is the node image's container; pick another name"
    if c.metrics_enabled and c.metrics.name in [*names, *([c.accounting.name] if c.accounting else [])]:
        yield (
            f"metrics.name: {c.metrics.name!r} is also a node, web_app or accounting name; the metrics container "
            "needs a name of its own"
        )
    if c.accounting and c.accounting.name in names:
        yield (
            f"accounting.name: {c.accounting.name!r} is also a node or web_app name; the database container "
            "needs a name of its own (node, web_app and accounting names must be unique)"
        )


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
    if c.accounting:
        pairs.append(("accounting.nat_address", c.accounting.nat_address, c.accounting_host))
    if c.metrics_enabled:
        pairs.append(("metrics.nat_address", c.metrics.nat_address, c.controller_host))
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
        yield f"nodes[].nat_address: {address} is assigned more than once (nodes, web_app and accounting)"
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
    """A node's GPUs come from its own host's gpu.devices (or its stand-ins), less the web app's."""
    for prefix, host, nodes in _hosts(c):
        gpu = host.gpu
        declared = len(c.host_gpu_pool(host))
        reserved = len(gpu.devices) - declared
        besides = f" besides the web app's {reserved}" if reserved else ""
        source = f"{prefix}gpu.stand_in.count" if gpu.stand_in else f"{prefix}gpu.devices"
        if gpu.share_between_nodes:
            for i, node in nodes:
                if node.gpus > declared:
                    yield (f"nodes[{i}].gpus: {node.gpus} GPUs but {source} declares only {declared}{besides}")
            continue
        wanted = sum(node.gpus for _, node in nodes)
        if wanted > declared:
            on = f" on host {host.name!r}" if c.multi_host else ""
            more = f"raise {prefix}gpu.stand_in.count" if gpu.stand_in else "add devices"
            yield (
                f"nodes[].gpus: the nodes{on} ask for {wanted} GPUs in all but {source} declares "
                f"{declared}{besides}; {more}, lower nodes[].gpus, or set {prefix}gpu.share_between_nodes: true "
                "to share GPUs between nodes"
            )


def rule_web_app_gpus(c: ClusterConfig) -> Iterator[str]:
    """The app's GPUs are declared devices; unless shared, they are taken out of the nodes' pool."""
    if not c.web_app:
        return
    for path in _duplicates(c.web_app.gpus):
        yield f"web_app.gpus: {path} is listed more than once"
    host = c.node_host(c.web_app)
    prefix = f"hosts[{c.cluster_hosts.index(host)}]." if c.multi_host else ""
    for i, path in enumerate(c.web_app.gpus):
        if path not in host.gpu.devices:
            yield f"web_app.gpus[{i}]: {path} is not one of {prefix}gpu.devices"
    if c.web_app.share_gpus and not c.web_app.gpus:
        yield "web_app.share_gpus: true but web_app.gpus lists no device to share"


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
        if partition.nodes == []:
            yield (
                f"slurm.partitions[{i}].nodes: empty; list the partition's nodes, or leave nodes out to mean every node"
            )
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
    if c.accounting and c.accounting.host is not None:
        yield "accounting.host", c.accounting.host


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
    yield from _route_addresses(hosts)
    for (i, a), (j, b) in ((x, y) for x in enumerate(hosts) for y in enumerate(hosts) if x[0] < y[0]):
        same_machine = not a.is_ssh and not b.is_ssh
        if same_machine:
            yield f"hosts[{j}].connection: hosts[{i}] is already the local host; only one host can be local"
        if not _same_place(a, b):
            continue
        for field in ("state_dir", "run_dir", "lxc_dir"):
            if getattr(a, field) == getattr(b, field):
                yield (
                    f"hosts[{j}].{field}: {getattr(b, field)} is also hosts[{i}].{field} on the same machine "
                    f"({a.name}, {b.name}); give each host its own"
                )
        taken = {a.network.nat_bridge.name, a.network.cluster_bridge.name}
        for field in ("nat_bridge", "cluster_bridge"):
            name = getattr(b.network, field).name
            if name in taken:
                yield (
                    f"hosts[{j}].network.{field}.name: {name!r} is also a bridge of hosts[{i}] on the same machine "
                    f"({a.name}, {b.name}); give each host its own bridges"
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
    for i, host in enumerate(hosts):
        if host.retired and not host.is_ssh:
            yield f"hosts[{i}].retired: only a host reached over SSH can be retired; {host.name!r} is this machine"


def _subnets(host: ClusterHostConfig) -> list[tuple[str, IPv4Network]]:
    return [
        ("network.nat_bridge.address", host.network.nat_bridge.subnet),
        ("network.cluster_bridge.subnet", host.network.cluster_bridge.subnet),
    ]


def _route_addresses(hosts: list[ClusterHostConfig]) -> Iterator[str]:
    """The address the other hosts route a host's containers through is a real one, outside
    every container subnet (a route via an address inside the subnet it leads to is refused)."""
    for i, host in enumerate(hosts):
        address = host.address
        if address is None:
            continue
        if address.is_loopback or address.is_unspecified or address.is_multicast or address.is_reserved:
            yield (
                f"hosts[{i}].address: {address} is a loopback, unspecified, multicast or reserved address; "
                "give the address the other hosts reach this one at"
            )
            continue
        for j, other in enumerate(hosts):
            for field, net in _subnets(other):
                if address in net:
                    yield f"hosts[{i}].address: {address} is inside hosts[{j}].{field} {net}, a container subnet"


def _same_place(a: ClusterHostConfig, b: ClusterHostConfig) -> bool:
    """Two hosts reached at the same SSH address (and a local one) may be one machine: every
    spelling of this machine (127.0.0.0/8, localhost) is the local host; an EC2 instance is a
    machine of its own."""
    if a.is_ec2 or b.is_ec2:
        return False
    addr_a = a.connection.address if a.is_ssh else None
    addr_b = b.connection.address if b.is_ssh else None
    return same_machine_key(addr_a) == same_machine_key(addr_b)


def rule_names_slurm_and_lxc_can_use(c: ClusterConfig) -> Iterator[str]:
    for i, node in enumerate(c.nodes):
        if node.name.lower() in SLURM_RESERVED_NODE_NAMES:
            yield (
                f"nodes[{i}].name: {node.name!r} is a word Slurm reserves "
                f"({', '.join(sorted(SLURM_RESERVED_NODE_NAMES))}); pick another name"
            )
    for i, partition in enumerate(c.slurm.partitions):
        if partition.name.lower() in SLURM_RESERVED_PARTITION_NAMES:
            yield f"slurm.partitions[{i}].name: {partition.name!r} is a word Slurm reserves; pick another name"
    owners = [(f"nodes[{i}].name", n.name) for i, n in enumerate(c.nodes)]
    if c.web_app:
        owners.append(("web_app.name", c.web_app.name))
    if c.accounting:
        owners.append(("accounting.name", c.accounting.name))
    if c.metrics_enabled:
        owners.append(("metrics.name", c.metrics.name))
    for field, name in owners:
        if name in INTERNAL_CONTAINER_NAMES:
            yield (
                f"{field}: {name!r} would be the container {c.container_name(name)}, which the program "
                "uses itself (the node image); pick another name"
            )


def rule_forward_ports(c: ClusterConfig) -> Iterator[str]:
    ports = [("web_app.host_port", c.web_app.host_port)] if c.web_app else []
    ports += [(f"forwards[{i}].host_port", f.host_port) for i, f in enumerate(c.forwards)]
    for field, port in ports:
        if port < FIRST_FORWARD_PORT:
            yield f"{field}: {port} is a well-known port of the host; forward a port from {FIRST_FORWARD_PORT} up"
        elif port in SLURM_PORTS:
            yield f"{field}: {port} is Slurm's own port ({', '.join(map(str, sorted(SLURM_PORTS)))}); pick another"


def _system_dir_problem(field: str, path: str, trees: Iterable[str]) -> str | None:
    if path in SYSTEM_DIRS:
        return f"{field}: {path} is a system directory; use a directory of its own (e.g. /srv/gpucluster/...)"
    for tree in trees:
        if is_within(path, tree):
            return f"{field}: {path} is inside {tree}, which the cluster must not use; pick another directory"
    return None


def _host_fields(c: ClusterConfig, i: int) -> tuple[str, str]:
    """How a host's directories and GPU settings are named in messages."""
    return ("host.", "gpu.") if not c.multi_host else (f"hosts[{i}].", f"hosts[{i}].gpu.")


def rule_host_paths(c: ClusterConfig) -> Iterator[str]:
    for i, host in enumerate(c.cluster_hosts):
        at, gpu_at = _host_fields(c, i)
        state, shared = host.state_dir, host.shared_dir
        problem = _system_dir_problem(f"{at}state_dir", state, STATE_FORBIDDEN_TREES)
        if problem:
            yield problem
        problem = _system_dir_problem(f"{at}shared_dir", shared, KERNEL_AND_CONFIG_TREES)
        if problem:
            yield problem
        elif _related(shared, state):
            yield f"{at}shared_dir: {shared} overlaps {at}state_dir {state} (the munge key lives there)"
        yield from _runtime_dir_problems(at, host)
        cuda = host.gpu.cuda_path
        if cuda:
            problem = _system_dir_problem(f"{gpu_at}cuda_path", cuda, KERNEL_AND_CONFIG_TREES)
            if problem:
                yield problem
            elif _related(cuda, state):
                yield f"{gpu_at}cuda_path: {cuda} overlaps {at}state_dir {state} (the munge key lives there)"


def _runtime_dir_problems(at: str, host: ClusterHostConfig) -> Iterator[str]:
    """run_dir and lxc_dir: the system's own, or a directory only root can write to, apart
    from the shared directory."""
    for field, trees in (("run_dir", RUN_DIR_FORBIDDEN_TREES), ("lxc_dir", LXC_DIR_FORBIDDEN_TREES)):
        path, default = getattr(host, field), ClusterHostConfig.model_fields[field].default
        problem = None if path == default else _system_dir_problem(f"{at}{field}", path, trees)
        if problem:
            yield problem
        elif _related(path, host.shared_dir):
            yield f"{at}{field}: {path} overlaps {at}shared_dir {host.shared_dir}, which the nodes' users can write"


def rule_driver_files(c: ClusterConfig) -> Iterator[str]:
    for h, host in enumerate(c.cluster_hosts):
        _, gpu_at = _host_fields(c, h)
        for i, pattern in enumerate(host.gpu.driver_files):
            directory, _, name = pattern.rpartition("/")
            field = f"{gpu_at}driver_files[{i}]"
            trees = [tree for tree in (*DRIVER_FILE_FORBIDDEN_TREES, host.state_dir) if is_within(directory, tree)]
            if re.search(r"[*?\[\]]", directory):
                yield f"{field}: {pattern} may only use glob characters in its last part (the file name)"
            elif not directory or not name.strip("*?[]"):
                yield f"{field}: {pattern} must name files in a directory below / (e.g. /usr/lib/.../libcuda.so*)"
            elif trees:
                yield f"{field}: {pattern} is inside {trees[0]}, whose files never go into a container"


# A GPU's device node: nvidia0, nvidia1... (nvidiactl, nvidia-uvm, nvidia-modeset are the driver's).
GPU_DEVICE_NAME = re.compile(r"^nvidia[0-9]+$")


def rule_device_paths(c: ClusterConfig) -> Iterator[str]:
    for h, host in enumerate(c.cluster_hosts):
        _, gpu_at = _host_fields(c, h)
        device_dir = c.host_device_dir(host)
        devices = [(f"{gpu_at}devices[{i}]", path) for i, path in enumerate(host.gpu.devices)]
        devices += [(f"{gpu_at}control_devices[{i}]", path) for i, path in enumerate(host.gpu.control_devices)]
        for field, path in devices:
            directory, _, name = path.rpartition("/")
            if not (is_within(directory, "/dev") or is_within(directory, device_dir)):
                yield (
                    f"{field}: {path} must be a device node under /dev or the cluster's private device "
                    f"directory {device_dir}"
                )
            elif not name.startswith("nvidia"):
                yield f"{field}: {path} is not an NVIDIA device node (its name must start with 'nvidia')"
            elif field.split(".")[-1].startswith("devices[") and not GPU_DEVICE_NAME.match(name):
                yield (
                    f"{field}: {path} is not a GPU (a GPU is nvidia<N>; {name} is a driver control device, "
                    "which goes under control_devices)"
                )


def rule_users(c: ClusterConfig) -> Iterator[str]:
    for i, user in enumerate(c.users):
        for field, name in (("name", user.name), ("group", user.group)):
            if name is not None and is_system_account(name):
                yield (
                    f"users[{i}].{field}: {name!r} is a system account or group (Debian's base accounts, the "
                    "daemons the cluster installs, systemd-*, _*), never a person's; pick another name"
                )
    for name in _duplicates([u.name for u in c.users]):
        yield f"users[].name: {name!r} is listed more than once"
    for uid in _duplicates([u.uid for u in c.users]):
        yield f"users[].uid: {uid} is given to more than one user"
    groups: dict[int, set[str]] = {}
    for user in c.users:
        groups.setdefault(user.gid, set()).add(user.group_name)
    for gid, names in groups.items():
        if len(names) > 1:
            yield f"users[].gid: {gid} is the group of {sorted(names)}; one gid, one group name"
    for name in _duplicates([name for names in groups.values() for name in names]):
        yield f"users[].group: {name!r} is given more than one gid"


def rule_accounting(c: ClusterConfig) -> Iterator[str]:
    if not c.accounting:
        return
    database = c.accounting_host
    if database.retired:
        which = "named" if c.accounting.host else "default: the controller's host"
        yield (
            f"accounting.host: the database's host {database.name!r} ({which}) is retired; "
            "the database needs a live host (name one in accounting.host)"
        )
    accounting, users = c.accounting, {u.name for u in c.users}
    qos = [q.name for q in accounting.qos]
    for name in _duplicates(qos):
        yield f"accounting.qos[].name: {name!r} is listed more than once"
    for name in _duplicates([a.name for a in accounting.accounts]):
        yield f"accounting.accounts[].name: {name!r} is listed more than once"
    keywords = f"a word sacctmgr reads as a keyword ({', '.join(sorted(SACCTMGR_KEYWORDS))}); pick another name"
    for i, name in enumerate(qos):
        if name in SACCTMGR_KEYWORDS:
            yield f"accounting.qos[{i}].name: {name!r} is {keywords}"
    for i, account in enumerate(accounting.accounts):
        if account.name == "root":
            yield f"accounting.accounts[{i}].name: 'root' is Slurm's own account; pick another name"
        if account.name in SACCTMGR_KEYWORDS:
            yield f"accounting.accounts[{i}].name: {account.name!r} is {keywords}"
        for user in account.users:
            if user in SACCTMGR_KEYWORDS:
                yield f"accounting.accounts[{i}].users: {user!r} is {keywords}"
        for user in account.users:
            if user not in users:
                yield f"accounting.accounts[{i}].users: {user!r} is not one of users[].name"
        for name in _duplicates(account.users):
            yield f"accounting.accounts[{i}].users: {name!r} is listed more than once"
        for name in account.qos:
            if name not in qos and name != "normal":
                yield f"accounting.accounts[{i}].qos: {name!r} is not one of accounting.qos[].name (or 'normal')"
        if account.default_qos and account.default_qos not in (account.qos or ["normal"]):
            yield f"accounting.accounts[{i}].default_qos: {account.default_qos!r} is not one of the account's qos"
    if "normal" in qos:
        yield "accounting.qos[].name: 'normal' is Slurm's own QOS; pick another name"


def rule_aws(c: ClusterConfig) -> Iterator[str]:
    """EC2 hosts: an `aws` section, safe admin networks, fixed private addresses in the subnet,
    container subnets outside the VPC, daemons in containers, a known price."""
    if c.hosts is None:
        if c.aws is not None:
            yield "aws: EC2 hosts are listed under hosts (hosts[].connection.kind: ec2); this stack has no hosts"
        return
    hosts = c.cluster_hosts
    ec2 = [(i, h) for i, h in enumerate(hosts) if h.is_ec2]
    if c.aws is None:
        for i, _ in ec2:
            yield f"hosts[{i}].connection: kind ec2 needs cluster.aws (region, ami, ssh_public_key, admin_cidrs)"
        return
    if not ec2:
        yield "aws: no host has connection.kind ec2; remove aws or add an EC2 host"
        return
    aws = c.aws
    for j, cidr in enumerate(aws.admin_cidrs):
        if cidr.prefixlen == 0 and not aws.allow_ssh_from_anywhere:
            yield (
                f"aws.admin_cidrs[{j}]: {cidr} opens SSH to the whole internet; name your networks, "
                "or set aws.allow_ssh_from_anywhere: true to mean it"
            )
    subnet = aws.vpc.subnet_cidr
    vpc_cidr = getattr(aws.vpc, "cidr", subnet)
    if not subnet.subnet_of(vpc_cidr):
        yield f"aws.vpc.subnet_cidr: {subnet} is not inside aws.vpc.cidr {vpc_cidr}"
    for i, host in ec2:
        if host.address is None:
            yield f"hosts[{i}].address: required for an EC2 host: the instance's fixed private address in {subnet}"
        elif (
            host.address not in subnet
            or int(host.address) - int(subnet.network_address) < 4
            or (host.address == subnet.broadcast_address)
        ):
            yield (
                f"hosts[{i}].address: {host.address} is not a usable address of aws.vpc.subnet_cidr {subnet} "
                "(AWS keeps the first four and the last)"
            )
        for field, net in _subnets(host):
            if net.overlaps(vpc_cidr):
                yield f"hosts[{i}].{field}: {net} overlaps the VPC {vpc_cidr}; container subnets are routed beside it"
        if host.retired:
            yield f"hosts[{i}].retired: an EC2 host goes with its instance; remove it from hosts instead"
        if hourly_price(aws.region, host.connection.instance_type, aws.prices) is None:
            yield (
                f"hosts[{i}].connection.instance_type: no price for {host.connection.instance_type} in {aws.region} "
                f"(table of {PRICES_DATE}); add it under aws.prices (USD per hour)"
            )
    controller = c.slurm.controller
    if controller.placement == "host" and controller.node is None and c.controller_host.is_ec2:
        yield (
            f"slurm.controller.placement: 'host' on the EC2 host {c.controller_host.name!r}; on EC2 hosts slurmctld "
            "runs in a node container (the node image's Slurm version): use placement 'container'"
        )


def burst_price(c: ClusterConfig, instance_type) -> float | None:
    """USD per hour of a burst type: its own price, else the dated table's."""
    return instance_type.price or hourly_price(c.burst.region, instance_type.name, {})


def rule_burst(c: ClusterConfig) -> Iterator[str]:
    """Burst partitions: priced types, subnets apart from every other network of the cluster,
    room for every node, names of their own, and a controller the burst nodes reach without NAT."""
    burst = c.burst
    if burst is None:
        return
    for i, partition in enumerate(burst.partitions):
        for j, instance_type in enumerate(partition.instance_types):
            if burst_price(c, instance_type) is None:
                yield (
                    f"burst.partitions[{i}].instance_types[{j}].price: no price for {instance_type.name} in "
                    f"{burst.region} (table of {PRICES_DATE}); give its USD per hour"
                )
    others = [(f"{prefix}{field}", net) for prefix, host, _ in _hosts(c) for field, net in _subnets(host)]
    if c.aws is not None:
        others.append(("aws.vpc.cidr", getattr(c.aws.vpc, "cidr", c.aws.vpc.subnet_cidr)))
    for i, subnet in enumerate(burst.subnets):
        for field, net in others:
            if subnet.cidr.overlaps(net):
                yield f"burst.subnets[{i}].cidr: {subnet.cidr} overlaps {field} {net}; burst subnets are routed apart"
    router = burst.vpn.router_address
    if router in burst.vpc_cidr or any(router in net for _, net in others):
        yield (
            f"burst.vpn.router_address: {router} is inside the burst VPC or a container subnet; give the "
            "on-premises address of the VPN router the controller's host reaches directly"
        )
    for j, net in enumerate(burst.on_premises_cidrs):
        if net.overlaps(burst.vpc_cidr):
            yield f"burst.on_premises_cidrs[{j}]: {net} overlaps burst.vpc_cidr {burst.vpc_cidr}"
    wanted, room = sum(p.max_nodes for p in burst.partitions), burst.addresses_available
    if wanted > room:
        yield (
            f"burst.partitions[].max_nodes: {wanted} nodes in all, but burst.subnets hold {room} instances "
            "(AWS keeps 5 addresses of each subnet); lower max_nodes or add subnets"
        )
    controller = c.controller_address
    if not any(controller in net for net in burst.on_premises_cidrs):
        yield (
            f"burst.on_premises_cidrs: the controller's address {controller} is in none of them; burst nodes "
            "would reach slurmctld only through NAT, and slurmctld must connect back to the address it sees "
            "(cloud_reg_addrs): add the controller's network"
        )
    taken = set(c.node_names) | {p.name for p in c.slurm.partitions}
    for i, partition in enumerate(burst.partitions):
        if partition.name in {p.name for p in c.slurm.partitions}:
            yield f"burst.partitions[{i}].name: {partition.name!r} is also a slurm.partitions name"
        clash = sorted(taken & set(partition.node_names))
        if clash:
            yield f"burst.partitions[{i}].name: its node {clash[0]} is also a node or partition name"
    for name in _duplicates([p.name for p in burst.partitions]):
        yield f"burst.partitions[].name: {name!r} is listed more than once"


CLUSTER_RULES = (
    rule_aws,
    rule_burst,
    rule_names_slurm_and_lxc_can_use,
    rule_forward_ports,
    rule_host_paths,
    rule_driver_files,
    rule_device_paths,
    rule_unique_node_names,
    rule_bridges_distinct,
    rule_nat_addresses_in_subnet,
    rule_cluster_addresses_in_subnet,
    rule_unique_addresses,
    rule_gpu_devices,
    rule_stand_in_gpus,
    rule_gpus_match_devices,
    rule_web_app_gpus,
    rule_controller_node,
    rule_partitions,
    rule_forwards,
    rule_users,
    rule_accounting,
    rule_shared_fs,
    rule_metrics_ports,
    rule_burst_shared_fs,
)

MULTI_HOST_RULES = (rule_hosts, *CLUSTER_RULES)
