"""GpuCluster: the whole local GPU Slurm cluster as one dependency graph."""

import socket
from pathlib import Path

import pulumi
import pulumi_random as random

from components.app.web_app import WebApp
from components.config import ClusterConfig
from components.host.gpu_host import GpuHost
from components.lxc.cuda_container import CudaContainer
from components.lxc.node_image import NodeImage
from components.network.bridges import Bridges
from components.network.port_forward import PortForward
from components.slurm.controller import SlurmController
from components.slurm.node import SlurmNode
from components.slurm.slurm_conf import render_slurm_conf
from components.transport import connect, env_list, host_command

# The cluster-wide health check is a Slurm script.
SLURM_FILES = Path(__file__).parent / "slurm" / "files"
HOST_FILES = Path(__file__).parent / "host" / "files"
NETWORK_FILES = Path(__file__).parent / "network" / "files"


class GpuCluster(pulumi.ComponentResource):
    """Host, bridges, node image, CUDA containers, Slurm, the web app and its forward.

    The order comes from the graph: preflight -> packages -> bridges and image ->
    containers (in parallel, no edges between them) -> controller -> slurmd on every node
    -> health gate; web app container -> app -> port forward.
    """

    controller_address: pulumi.Output[str]
    nodes: pulumi.Output[dict]
    node_list: pulumi.Output[str]
    web_url: pulumi.Output[str]
    slurm_env: pulumi.Output[str]
    node_shells: pulumi.Output[dict]
    host_facts: pulumi.Output[dict]

    def __init__(self, name: str, config: ClusterConfig, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-cluster:cluster:GpuCluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        multi = config.multi_host
        gpus = config.gpu_assignment()

        # One host's stack names its resources as before; with `hosts`, per-host resources
        # carry the host's name. A retired host gets nothing: its commands leave the program.
        key = (
            random.RandomBytes(f"{name}-munge-key", length=1024, opts=pulumi.ResourceOptions(parent=self))
            if multi
            else None
        )
        self.transports, self.hosts, self.bridges_of, self.images, self.munge_keys = {}, {}, {}, {}, {}
        self.containers = {}
        for host in config.active_hosts:
            prefix = f"{name}-{host.name}" if multi else name
            view = config.for_host(host)
            transport = connect(prefix, host, child)
            self.transports[host.name] = transport
            gpu_host = GpuHost(f"{prefix}-host", view, opts=child, transport=transport)
            self.hosts[host.name] = gpu_host
            after_packages = pulumi.ResourceOptions(parent=self, depends_on=[gpu_host.packages, gpu_host.shared_dir])
            bridges = Bridges(f"{prefix}-bridges", view, opts=after_packages, transport=transport)
            image = NodeImage(f"{prefix}-image", view, opts=after_packages, transport=transport)
            self.bridges_of[host.name], self.images[host.name] = bridges, image
            if key is not None:
                self.munge_keys[host.name] = host_command(
                    f"{prefix}-munge-key",
                    transport=transport,
                    create=HOST_FILES / "munge_key_install_create.sh",
                    delete=HOST_FILES / "munge_key_delete.sh",
                    environment={"MUNGE_KEY_FILE": f"{config.host_cluster_dir(host)}/munge.key"},
                    stdin=pulumi.Output.secret(key.base64),
                    opts=pulumi.ResourceOptions(parent=self, depends_on=[gpu_host.packages]),
                )
            for node in view.nodes:
                self.containers[node.name] = CudaContainer(
                    f"{name}-{node.name}",
                    view,
                    hostname=node.name,
                    nat_address=node.nat_address,
                    cluster_address=node.cluster_address,
                    gpu_devices=gpus[node.name],
                    opts=pulumi.ResourceOptions(parent=self, depends_on=[bridges, image]),
                    transport=transport,
                )
        self.routes = self._routes(name, config) if multi else []
        # Kept for the one-host outputs and callers.
        first = config.active_hosts[0].name
        self.host, self.bridges, self.image = self.hosts[first], self.bridges_of[first], self.images[first]

        controller_node = config.controller_node
        controller_host = config.controller_host
        ctl_transport = self.transports[controller_host.name]
        if controller_node:
            controller_hostname = controller_node.name
        elif multi:
            controller_hostname = controller_host.hostname
        else:
            controller_hostname = socket.gethostname().split(".")[0]
        controller_deps = [self.hosts[controller_host.name].packages, *self.routes]
        if controller_node:
            controller_deps.append(self.containers[controller_node.name])
        self.controller = SlurmController(
            f"{name}-slurm",
            config,
            controller_hostname=controller_hostname,
            opts=pulumi.ResourceOptions(parent=self, depends_on=controller_deps),
            transport=ctl_transport,
            munge_key=self.munge_keys.get(controller_host.name),
        )
        # Every other host gets the cluster's munged and a slurm.conf for its Slurm clients
        # (sinfo, srun there; slurmd's create waits for its node with them).
        self.clients = {controller_host.name: self.controller.client}
        for host in config.active_hosts:
            if host.name == controller_host.name:
                continue
            host_dir = config.host_cluster_dir(host)
            socket_path = config.host_munge_socket(host)
            self.clients[host.name] = host_command(
                f"{name}-{host.name}-slurm-client",
                transport=self.transports[host.name],
                create=SLURM_FILES / "client_create.sh",
                delete=SLURM_FILES / "client_delete.sh",
                environment={
                    "CLUSTER": config.name,
                    "CLUSTER_DIR": host_dir,
                    "MUNGE_KEY_FILE": f"{host_dir}/munge.key",
                    "MUNGE_SOCKET": socket_path,
                    "SLURM_CONF_PATH": f"{host_dir}/slurm.conf",
                    "SLURM_CONF_TEXT": render_slurm_conf(config, controller_hostname, munge_socket=socket_path),
                },
                opts=pulumi.ResourceOptions(parent=self, depends_on=[self.munge_keys[host.name]]),
            )
        self.slurm_nodes = []
        for node in config.nodes:
            host = config.node_host(node)
            deps = [self.containers[node.name], self.controller]
            if multi:
                deps += [self.munge_keys[host.name], self.clients[host.name]]
            self.slurm_nodes.append(
                SlurmNode(
                    f"{name}-{node.name}-slurm",
                    config,
                    node,
                    opts=pulumi.ResourceOptions(parent=self, depends_on=deps),
                    transport=self.transports[host.name],
                    host_dir=config.host_cluster_dir(host) if multi else None,
                )
            )
        # Fails the apply, loudly, when a node (of any host) is not idle or a GPU job cannot run.
        self.health = host_command(
            f"{name}-health",
            transport=ctl_transport,
            create=SLURM_FILES / "health_check.sh",
            environment={
                "SLURM_CONF": f"{config.cluster_dir}/slurm.conf",
                "NODES": config.hostlist,
                "NODE_COUNT": str(len(config.nodes)),
                "GPU_NODES": str(sum(1 for paths in gpus.values() if paths)),
            },
            triggers=[config.hostlist],
            opts=pulumi.ResourceOptions(parent=self, depends_on=self.slurm_nodes),
        )

        self.web_app = None
        if config.web_app:
            web_host = config.node_host(config.web_app)
            self.web_app = WebApp(
                f"{name}-web",
                config.for_host(web_host),
                opts=pulumi.ResourceOptions(
                    parent=self, depends_on=[self.bridges_of[web_host.name], self.images[web_host.name]]
                ),
                transport=self.transports[web_host.name],
            )
        self.forwards = [
            PortForward(
                f"{name}-fwd-{forward.host_port}",
                config,
                forward,
                opts=pulumi.ResourceOptions(parent=self, depends_on=[self._forward_target(config, forward.target)]),
                transport=self.transports[self._target_host(config, forward.target)],
            )
            for forward in config.all_forwards
        ]

        nat_gateway = self.host_gateway(config)
        self.controller_address = self.controller.address
        self.nodes = pulumi.Output.from_input(
            {
                node.name: {
                    "container": config.container_name(node.name),
                    "nat_address": str(node.nat_address),
                    "cluster_address": str(node.cluster_address),
                    "gpus": gpus[node.name],
                }
                for node in config.nodes
            }
        )
        self.node_list = pulumi.Output.from_input(config.hostlist)
        self.web_url = pulumi.Output.from_input(
            f"http://{nat_gateway}:{config.web_app.host_port}/" if config.web_app else ""
        )
        self.slurm_env = pulumi.Output.from_input(f"export SLURM_CONF={config.cluster_dir}/slurm.conf")
        self.node_shells = pulumi.Output.from_input({node.name: _shell(config, node) for node in config.nodes})
        self.host_facts = pulumi.Output.all(
            devices=self.host.devices,
            driver_version=self.host.driver_version,
            cgroup_version=self.host.cgroup_version,
            uvm_major=self.host.uvm_major,
        )
        self.register_outputs(
            {
                "controller_address": self.controller_address,
                "nodes": self.nodes,
                "node_list": self.node_list,
                "web_url": self.web_url,
                "slurm_env": self.slurm_env,
                "node_shells": self.node_shells,
                "host_facts": self.host_facts,
            }
        )

    def _routes(self, name: str, config: ClusterConfig) -> list[pulumi.Resource]:
        """Per host: routes to every other host's NAT subnet via that host, and the forwarding
        they need. Controller and nodes wait for them, so Slurm traffic crosses hosts."""
        routes = []
        for host in config.active_hosts:
            others = [h for h in config.active_hosts if h.name != host.name]
            if not others:
                continue
            routes.append(
                host_command(
                    f"{name}-{host.name}-routes",
                    transport=self.transports[host.name],
                    create=NETWORK_FILES / "routes_create.sh",
                    delete=NETWORK_FILES / "routes_delete.sh",
                    environment={
                        "CLUSTER": config.name,
                        "CLUSTER_DIR": config.host_cluster_dir(host),
                        "NAT_BRIDGE": host.network.nat_bridge.name,
                        "NAT_SUBNET": str(host.network.nat_bridge.subnet),
                        "ROUTES": env_list(f"{h.network.nat_bridge.subnet} {h.address}" for h in others),
                    },
                    opts=pulumi.ResourceOptions(parent=self, depends_on=[self.bridges_of[host.name]]),
                )
            )
        return routes

    @staticmethod
    def host_gateway(config: ClusterConfig):
        """The NAT gateway of the web app's host (where its port is forwarded)."""
        host = config.node_host(config.web_app) if config.web_app else config.controller_host
        return host.network.nat_bridge.address.ip

    @staticmethod
    def _target_host(config: ClusterConfig, target: str) -> str:
        if config.web_app and target == config.web_app.name:
            return config.node_host(config.web_app).name
        return config.node_host(next(n for n in config.nodes if n.name == target)).name

    def _forward_target(self, config: ClusterConfig, target: str) -> pulumi.Resource:
        """A forward waits for what answers behind it: the app, or the node's slurmd."""
        if self.web_app and config.web_app and target == config.web_app.name:
            return self.web_app.service
        return self.containers[target]


def _shell(config: ClusterConfig, node) -> str:
    """How to get a shell in a node, on its host."""
    host = config.node_host(node)
    path = f"-P {host.lxc_dir} " if host.lxc_dir != "/var/lib/lxc" else ""
    command = f"lxc-attach {path}-n {config.container_name(node.name)}"
    return f"{command}  (on host {host.name})" if config.multi_host else command
