"""Typed config of the GPU Slurm cluster, read from the stack's `gpu-cluster:cluster` key.

The composition: each area's models live beside its components (components/<area>/config.py)
and its cross-field rules beside them (components/<area>/rules.py); this module composes the
models into a host (ClusterHostConfig) and the cluster (ClusterConfig), and registers the
rules in CLUSTER_RULES, all run together so one `pulumi up` reports every problem at once,
each naming the field and what it accepts. Only the host layout rule, which every other rule
relies on, lives here. The areas never import this module: components/cluster.py hands each
component the slice it models.
"""

import functools
from collections import Counter
from collections.abc import Iterator
from ipaddress import IPv4Address, IPv4Network

from pydantic import Field, model_validator

from components.app.config import WebAppConfig
from components.app.rules import rule_web_app_gpus
from components.aws.config import AwsConfig, Ec2Connection
from components.aws.rules import rule_aws
from components.burst.config import BurstConfig
from components.burst.rules import rule_burst
from components.config_rules_beside_errors import UNDERIVED, rebuilding, valid_as
from components.config_types import Address, ClusterIdentity, Hostname, SafePath, StrictBool, StrictModel, duplicates
from components.host.config import GpuHourPrice, HostConfig, LocalConnection, SshConnection, UserConfig
from components.host.rules import rule_driver_files, rule_host_paths, rule_hosts, rule_users
from components.lxc.config import STAND_IN_MAX, GpuConfig, ImageConfig, device_dir_of, stand_in_devices
from components.lxc.rules import (
    rule_device_paths,
    rule_gpu_devices,
    rule_gpus_match_devices,
    rule_stand_in_gpus,
    rule_unique_node_names,
)
from components.metrics.config import MetricsConfig
from components.network.config import NetworkConfig, PortForwardConfig
from components.network.rules import (
    rule_bridges_distinct,
    rule_cluster_addresses_in_subnet,
    rule_forward_ports,
    rule_forwards,
    rule_nat_addresses_in_subnet,
    rule_unique_addresses,
)
from components.sharedfs.config import SharedFsConfig, rule_shared_fs
from components.slurm.config import AccountingConfig, NodeConfig, SlurmConfig, slurm_hostlist
from components.slurm.rules import (
    rule_accounting,
    rule_controller_node,
    rule_names_slurm_and_lxc_can_use,
    rule_partitions,
)

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

    def each_host(self) -> Iterator[tuple[str, "ClusterHostConfig", list[tuple[int, NodeConfig]]]]:
        """Each host with the prefix of its fields ('' for a one-host stack) and its nodes (with
        index): how the rules name a host's fields."""
        for i, host in enumerate(self.cluster_hosts):
            prefix = f"hosts[{i}]." if self.multi_host else ""
            nodes = [(j, n) for j, n in enumerate(self.nodes) if self.node_host(n).name == host.name]
            yield prefix, host, nodes

    def host_prefixes(self, i: int) -> tuple[str, str]:
        """How the rules name the i-th host's directories and GPU settings."""
        return ("host.", "gpu.") if not self.multi_host else (f"hosts[{i}].", f"hosts[{i}].gpu.")

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


# ---- the rule every other rule relies on, and the registry of all ----


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
    for name in duplicates(names):
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
)


MULTI_HOST_RULES = (rule_hosts, *CLUSTER_RULES)
