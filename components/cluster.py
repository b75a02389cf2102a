"""GpuCluster: the whole local GPU Slurm cluster as one dependency graph."""

import socket
from pathlib import Path

import pulumi

from components.app.web_app import WebApp
from components.config import ClusterConfig
from components.host.boot_unit import BootUnit, render_host_state
from components.host.gpu_host import GpuHost
from components.lxc.cuda_container import ContainerPlatform, CudaContainer
from components.lxc.lxc_conf import ContainerSpec
from components.lxc.node_image import NodeImage
from components.network.bridges import Bridges
from components.network.port_forward import PortForward
from components.slurm.controller import ControllerPlacement, SlurmController
from components.slurm.node import SlurmNode
from components.slurm.slurm_conf import SLURMCTLD_PORT, render_gres_conf, render_slurm_conf
from components.transport import host_command

# The cluster-wide health check is a Slurm script.
SLURM_FILES = Path(__file__).parent / "slurm" / "files"


class GpuCluster(pulumi.ComponentResource):
    """Host, bridges, node image, CUDA containers, Slurm, the web app and its forward.

    The order comes from the graph: preflight -> packages -> bridges and image ->
    containers (in parallel, no edges between them) -> controller -> slurmd on every node
    -> health gate; web app container -> app -> port forward.

    This is where the whole ClusterConfig is sliced: each component gets the part it models.
    """

    controller_address: pulumi.Output[str]
    nodes: pulumi.Output[dict]
    node_list: pulumi.Output[str]
    web_url: pulumi.Output[str]
    slurm_env: pulumi.Output[str]
    node_shells: pulumi.Output[dict]
    host_facts: pulumi.Output[dict]
    boot_command: pulumi.Output[str]

    def __init__(self, name: str, config: ClusterConfig, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-cluster:cluster:GpuCluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)

        cluster = config.identity
        containers = [cluster.container_name(n) for n in [*config.node_names, "image"]]
        if config.web_app:
            containers.append(cluster.container_name(config.web_app.name))
        self.host = GpuHost(
            f"{name}-host",
            cluster,
            config.host,
            config.network,
            gpu_devices=config.gpu.devices,
            host_ports=[forward.host_port for forward in config.all_forwards],
            controller_port=None if config.controller_node else SLURMCTLD_PORT,
            containers=containers,
            stand_in_gpus=config.gpu.stand_in.count if config.gpu.stand_in else 0,
            device_dir=config.device_dir,
            opts=child,
        )
        after_packages = pulumi.ResourceOptions(parent=self, depends_on=[self.host.packages, self.host.shared_dir])
        self.bridges = Bridges(f"{name}-bridges", cluster, config.network, opts=after_packages)
        self.image = NodeImage(f"{name}-image", cluster, config.image, opts=after_packages)

        platform = ContainerPlatform(
            network=config.network, gpu=config.gpu, image=config.image, shared_dir=config.host.shared_dir
        )
        gpus = config.gpu_assignment()
        self.containers = {
            node.name: CudaContainer(
                f"{name}-{node.name}",
                cluster,
                ContainerSpec(
                    hostname=node.name,
                    nat_address=node.nat_address,
                    cluster_address=node.cluster_address,
                    gpu_devices=gpus[node.name],
                ),
                platform,
                image=self.image.rootfs,
                opts=pulumi.ResourceOptions(parent=self, depends_on=[self.bridges, self.image]),
            )
            for node in config.nodes
        }

        controller_node = config.controller_node
        controller_hostname = controller_node.name if controller_node else socket.gethostname().split(".")[0]
        self.controller = SlurmController(
            f"{name}-slurm",
            cluster,
            ControllerPlacement(
                hostname=controller_hostname,
                address=config.controller_address,
                container=cluster.container_name(controller_node.name) if controller_node else None,
            ),
            slurm_conf=render_slurm_conf(config, controller_hostname),
            gres_conf=render_gres_conf(config),
            container=self.containers[controller_node.name].lxc if controller_node else None,
            # The key and the host's munged need only the host; slurmctld in a container waits
            # for it (SlurmController), so the key is made while the containers boot.
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.host.packages]),
        )
        self.slurm_nodes = [
            SlurmNode(
                f"{name}-{node.name}-slurm",
                cluster,
                node,
                controller_address=config.controller_address,
                container=self.containers[node.name].lxc,
                opts=pulumi.ResourceOptions(parent=self, depends_on=[self.containers[node.name], self.controller]),
            )
            for node in config.nodes
        ]
        # Fails the apply, loudly, when a node does not serve or a test job cannot run; never
        # waits on users' jobs (components/scripts/health_check.sh).
        self.health = host_command(
            f"{name}-health",
            create=SLURM_FILES / "health_check.sh",
            environment={
                "SLURM_CONF": f"{config.cluster_dir}/slurm.conf",
                "NODES": config.hostlist,
            },
            triggers=[config.hostlist],
            opts=pulumi.ResourceOptions(parent=self, depends_on=self.slurm_nodes),
        )

        self.web_app = None
        if config.web_app:
            self.web_app = WebApp(
                f"{name}-web",
                cluster,
                config.web_app,
                platform,
                image=self.image.rootfs,
                opts=pulumi.ResourceOptions(parent=self, depends_on=[self.bridges, self.image]),
            )
        self.forwards = [
            PortForward(
                f"{name}-fwd-{forward.host_port}",
                cluster,
                forward,
                config.target_address(forward.target),
                opts=pulumi.ResourceOptions(parent=self, depends_on=[self._forward_target(config, forward.target)]),
            )
            for forward in config.all_forwards
        ]

        # Written last, deleted first: a destroy cut short is not brought back at the next boot.
        everything = [self.health, *self.forwards, *([self.web_app] if self.web_app else [])]
        self.boot = BootUnit(
            f"{name}-boot",
            cluster,
            render_host_state(config),
            opts=pulumi.ResourceOptions(parent=self, depends_on=everything),
        )

        nat_gateway = config.network.nat_bridge.address.ip
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
        self.node_shells = pulumi.Output.from_input(
            {node.name: f"lxc-attach -n {config.container_name(node.name)}" for node in config.nodes}
        )
        self.host_facts = pulumi.Output.all(
            devices=self.host.devices,
            driver_version=self.host.driver_version,
            cgroup_version=self.host.cgroup_version,
            uvm_major=self.host.uvm_major,
        )
        self.boot_command = self.boot.boot_command
        self.register_outputs(
            {
                "boot_command": self.boot_command,
                "controller_address": self.controller_address,
                "nodes": self.nodes,
                "node_list": self.node_list,
                "web_url": self.web_url,
                "slurm_env": self.slurm_env,
                "node_shells": self.node_shells,
                "host_facts": self.host_facts,
            }
        )

    def _forward_target(self, config: ClusterConfig, target: str) -> pulumi.Resource:
        """A forward waits for what answers behind it: the app, or the node's slurmd."""
        if self.web_app and config.web_app and target == config.web_app.name:
            return self.web_app.service
        return self.containers[target]
