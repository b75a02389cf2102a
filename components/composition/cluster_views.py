"""What the composed cluster means for the graph: the derived views ClusterConfig offers the
renderers, the rules and components/composition/cluster.py (its hosts and where each node, the controller
and the database run, names and paths, addresses, forwards, the GPUs dealt to each node).

A mixin of ClusterConfig (components/composition/config.py), kept apart from what the stack file says.
"""

from collections import Counter
from collections.abc import Iterator, Mapping
from ipaddress import IPv4Address, IPv4Network
from typing import Self

from components.common.config_types import ClusterIdentity
from components.composition.cluster_host import LOCAL_HOST, ClusterHostConfig
from components.host.config import HostConfig
from components.lxc.config import ImageConfig, device_dir_of
from components.network.config import PortForwardConfig
from components.slurm.config import NodeConfig, slurm_hostlist
from components.slurm.slurm_conf import SLURMCTLD_PORT, SLURMD_PORT, SRUN_PORTS


class ClusterViews:
    """The derived views of a ClusterConfig (its fields: components/composition/config.py)."""

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
        """The host a node (or the web app, or the login node) runs on; one-host stacks need not name it."""
        return self.host_named(node.host) if node.host else self.cluster_hosts[0]

    def for_host(self, host: "ClusterHostConfig") -> Self:
        """The cluster as one host sees it: its bridges, GPUs, directories, nodes, app and forwards.

        Per-host components (preflight, bridges, image, containers) take this view, so they
        are the same code for one host or many. A one-host stack's view is the stack itself.
        """
        if not self.multi_host:
            return self
        web = self.web_app if self.web_app and self.node_host(self.web_app).name == host.name else None
        login = self.login if self.login and self.node_host(self.login).name == host.name else None
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
                "login": login,
                "forwards": [f for f in self.forwards if f.target in on_host],
            }
        )

    def with_node_memory(self, memory: Mapping[str, int]) -> Self:
        """The cluster with the nodes that set no memory_mb given `memory` (MB by node name):
        their host's share (components/composition/node_memory.py), once it is measured."""
        nodes = [
            node.model_copy(update={"memory_mb": memory[node.name]}) if node.memory_mb is None else node
            for node in self.nodes
        ]
        return self.model_copy(update={"nodes": nodes})

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
    def containers_enabled(self) -> bool:
        return self.containers is not None and self.containers.enabled

    @property
    def named_containers(self) -> list[tuple[str, str]]:
        """(field, name) of every container a config section names, but the stack's registry's:
        the nodes, the web app, the login node, the database, Prometheus, the controller's own."""
        named = [(f"nodes[{i}].name", n.name) for i, n in enumerate(self.nodes)]
        for field, section in (("web_app", self.web_app), ("login", self.login), ("accounting", self.accounting)):
            if section:
                named.append((f"{field}.name", section.name))
        if self.metrics_enabled:
            named.append(("metrics.name", self.metrics.name))
        if self.slurm.controller.placement == "host":
            named.append(("slurm.controller.name", self.slurm.controller.name))
        return named

    @property
    def stack_registry(self):
        """The registry the stack runs (containers.registry), when containers are on."""
        return self.containers.registry if self.containers_enabled else None

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

    def client_node(self, host: "ClusterHostConfig") -> NodeConfig | None:
        """The node whose container runs a host's Slurm commands (the image's Slurm): the
        controller's where it is on this host, else the host's first node."""
        on_host = [node for node in self.nodes if (node.host or self.cluster_hosts[0].name) == host.name]
        if self.slurm.controller.placement != "host":  # (placement 'host': the controller's own container)
            wanted = self.slurm.controller.node or (self.nodes[0].name if self.nodes else None)
            on_host.sort(key=lambda node: node.name != wanted)
        return on_host[0] if on_host else None

    @property
    def accounting_host(self) -> "ClusterHostConfig":
        """Where the accounting database's container runs: `accounting.host`, or the controller's host."""
        wanted = self.accounting.host if self.accounting else None
        return self.host_named(wanted) if wanted else self.controller_host

    @property
    def node_image(self) -> ImageConfig:
        """The node image as built: with burst partitions also python3-venv, for the burst
        programs' own venv in slurmctld's container; with containers, Enroot and Pyxis (a
        cluster without either keeps its image)."""
        image = self.image
        if self.burst is not None and "python3-venv" not in image.extra_packages:
            image = image.model_copy(update={"extra_packages": [*image.extra_packages, "python3-venv"]})
        return image.with_containers() if self.containers_enabled else image

    @property
    def controller_address(self) -> IPv4Address:
        """slurmctld's address: its node's, or its own container's (placement 'host')."""
        node = self.controller_node
        if node:
            return node.nat_address
        subnet = self.controller_host.network.nat_bridge.subnet
        return self.slurm.controller.nat_address or subnet.broadcast_address - 1

    @property
    def controller_container(self) -> str:
        """The container slurmctld runs in: its node's, or its own (placement 'host')."""
        node = self.controller_node
        return self.container_name(node.name if node else self.slurm.controller.name)

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

    def route_entries(self, host: "ClusterHostConfig") -> list[str]:
        """routes_of as the route scripts read it: SUBNET,VIA, and SUBNET,VIA,burst for the burst
        VPC, which is not masqueraded but admitted only to Slurm's ports (burst_access)."""
        burst = self.burst.vpc_cidr if self.burst is not None else None
        return [f"{subnet},{via}" + (",burst" if subnet == burst else "") for subnet, via in self.routes_of(host)]

    def burst_access(self, host: "ClusterHostConfig") -> str:
        """What burst nodes may open into a host's NAT bridge, as inbound_rules reads it (entries
        SOURCES,ADDRESSES,PORTS): from the burst subnets, slurmctld's port on its container (a node's
        or its own) when it is here, slurmd's and srun's (SrunPortRange) on the nodes here. Empty without burst."""
        if self.burst is None:
            return ""
        sources = "+".join(str(subnet.cidr) for subnet in self.burst.subnets)
        entries = []
        if host.name == self.controller_host.name:  # slurmctld's container: a node's, or its own
            entries.append(f"{sources},{self.controller_address},{SLURMCTLD_PORT}")
        nodes = [str(node.nat_address) for node in self.nodes if self.node_host(node).name == host.name]
        if nodes:
            entries.append(f"{sources},{'+'.join(nodes)},{SLURMD_PORT}+{SRUN_PORTS[0]}:{SRUN_PORTS[1]}")
        return " ".join(entries)

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
        # The login node's SSH, limited like the web app's page.
        login = (
            [
                PortForwardConfig(
                    host_port=self.login.host_port,
                    target=self.login.name,
                    port=22,
                    allowed_sources=self.login.allowed_sources,
                )
            ]
            if self.login
            else []
        )
        return web + login + list(self.forwards)

    def forward_tag(self, host_port: int) -> str:
        return self.identity.forward_tag(host_port)

    def target_address(self, target: str) -> IPv4Address:
        """NAT-bridge address of a node, the web app or the login node (a forward's target)."""
        if self.web_app and target == self.web_app.name:
            return self.web_app.nat_address
        if self.login and target == self.login.name:
            return self.login.nat_address
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
        """GPU device paths of each node, from its own host's devices (less the web app's own),
        dealt in node order: a GPU belongs to one node."""
        assignment, next_gpu = {}, Counter()
        for node in self.nodes:
            host = self.node_host(node)
            pool = self.host_gpu_pool(host)
            start = next_gpu[host.name]
            assignment[node.name] = pool[start : start + node.gpus]
            next_gpu[host.name] += node.gpus
        return assignment
