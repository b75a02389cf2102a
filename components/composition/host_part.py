"""HostPart: one host's part of the GpuCluster (components/composition/cluster.py), one per host, also for
a one-host stack: the EC2 instance where the host is one, its transport, GpuHost, its mount of
the shared filesystem (and the server, on the serving host), bridges, node image, munge key,
container platform and node containers; the parent of all of them.

These resources were the GpuCluster's own children before host parts: each direct child here
carries an alias to that parent, and its children inherit it (the engine takes over a child
of an aliased parent under the parent's old URN), so an upgrade keeps every one in place.
"""

from dataclasses import dataclass
from pathlib import Path

import pulumi

from components.aws.efs import EfsFileSystem
from components.aws.instance import Ec2Host, InstanceSpec
from components.aws.site import Ec2Site
from components.common.transport import Machine, connect, host_command
from components.composition.cluster_host import ClusterHostConfig
from components.composition.config import ClusterConfig
from components.composition.node_memory import shares
from components.host.gpu_host import GpuHost
from components.host.host_size import measure_host
from components.lxc.config import RELEASES
from components.lxc.cuda_container import ContainerPlatform, CudaContainer
from components.lxc.lxc_conf import ContainerSpec, cpu_slots
from components.lxc.node_image import NodeImage
from components.network.bridges import Bridges
from components.sharedfs.config import ServedNfs, serving_host
from components.sharedfs.shared_fs import host_packages, nfs_server, served_directory, shared_mount
from components.slurm.slurm_conf import node_daemon_memory_mb

# The munge key's installation is the host's.
HOST_FILES = Path(__file__).parents[1] / "host" / "files"


@dataclass
class SharedParts:
    """What every host part uses of the cluster, made before the parts."""

    cluster: pulumi.Resource
    """The GpuCluster: the parent the host parts' resources had before (their aliases name it)."""
    munge_key: pulumi.Output[str] | None
    """Several hosts' one munge key (a secret); a one-host stack makes its own on the host."""
    ec2_site: Ec2Site | None
    efs: EfsFileSystem | None
    nfs_server: pulumi.Resource | None = None
    """The served NFS export's server, once the serving host's part made it (it comes first)."""


class HostPart(pulumi.ComponentResource):
    """One host's resources, named as before (`<prefix>-...`; prefix: the cluster's name, or
    `<name>-<host>` with `hosts`); the node containers `<name>-<node>`."""

    def __init__(
        self,
        name: str,
        config: ClusterConfig,
        host: ClusterHostConfig,
        shared: SharedParts,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("gpu-cluster:cluster:HostPart", f"{name}-{host.name}", None, opts)
        self.host_config, self._shared = host, shared
        prefix = f"{name}-{host.name}" if config.multi_host else name
        self.machine = self._ec2(prefix, config, host) if host.is_ec2 else None
        reached = self.machine and Machine(
            self.machine.ssh_address, self.machine.host_public_key, self.machine.instance
        )
        self.transport = connect(prefix, config.name, host, self._moved(), machine=reached)
        self.node_memory = self._node_memory(prefix, config, host)
        self.container_memory = self._container_memory(config, config.for_host(host).nodes)
        self.gpu_host = self._gpu_host(prefix, config, host)
        self.users = [self.gpu_host.users] if self.gpu_host.users else []
        # With a shared filesystem, the nodes bind its mount: mounted before bridges and image.
        # A one-host stack serves its export at its NAT bridge's address (for its burst nodes):
        # there the bridges come first, then the server, the mount, and the containers.
        late = not config.multi_host and isinstance(config.shared_fs, ServedNfs)
        mounted = [self._shared_fs(prefix, config)] if config.shared_fs and not late else []
        self._bridges_and_image(prefix, config, mounted)
        # What a container binding shared_dir (node, web app, Prometheus) waits for beyond the
        # host's bridges and image: the host's shared mount where it is made after the bridges.
        self.late_mounts = [self._shared_fs(prefix, config, self.bridges)] if late else []
        self.munge_key = self._munge_key(prefix, config) if shared.munge_key is not None else None
        view = config.for_host(host)
        self.platform = ContainerPlatform(
            network=view.network,
            gpu=view.gpu,
            image=config.node_image,
            shared_dir=view.host.shared_dir,
            users=tuple(config.users),
        )
        self.containers = self._containers(name, config)
        self.register_outputs({})

    def _moved(self, *depends_on: pulumi.Resource) -> pulumi.ResourceOptions:
        """Options of a direct child: this part as parent, the cluster as the parent it had."""
        return pulumi.ResourceOptions(
            parent=self, aliases=[pulumi.Alias(parent=self._shared.cluster)], depends_on=list(depends_on)
        )

    def _ec2(self, prefix: str, config: ClusterConfig, host: ClusterHostConfig) -> Ec2Host:
        """The instance first; its commands wait for SSH on it and go with it."""
        spec = InstanceSpec(
            config.name,
            host.connection,
            host.address,
            host.network.nat_bridge.subnet,
            (host.state_dir, host.shared_dir, host.lxc_dir),
        )
        return Ec2Host(f"{prefix}-ec2", config.aws, spec, self._shared.ec2_site, opts=self._moved())

    def _gpu_host(self, prefix: str, config: ClusterConfig, host: ClusterHostConfig) -> GpuHost:
        view = config.for_host(host)
        return GpuHost(
            f"{prefix}-host",
            config.host_identity(host),
            view.host,
            view.network,
            gpu_devices=view.gpu.devices,
            control_devices=view.gpu.control_devices,
            node_cpus=max((node.cpus for node in view.nodes), default=1),
            # The login node's limit counts too: people's shells take from the host like nodes.
            node_memory_mb=pulumi.Output.all(*self.container_memory.values()).apply(
                lambda limits: sum(limits) + (view.login.memory_mb if view.login else 0)
            ),
            host_ports=[forward.host_port for forward in view.all_forwards],
            containers=host_containers(config, host),
            stand_in_gpus=view.gpu.stand_in.count if view.gpu.stand_in else 0,
            device_dir=config.host_device_dir(host),
            driver_files=view.gpu.driver_files,
            users=tuple(config.users),
            extra_packages=host_packages(config, host),
            served=served_directory(config, host),
            image_debian=RELEASES[config.image.release].debian,
            accounting_data=(
                f"{config.host_cluster_dir(host)}/accounting/mysql"
                if config.accounting and config.accounting_host.name == host.name
                else ""
            ),
            accounting=config.accounting is not None,
            opts=self._moved(),
            transport=self.transport,
        )

    def _node_memory(self, prefix: str, config: ClusterConfig, host: ClusterHostConfig) -> dict[str, pulumi.Input[int]]:
        """Each of the host's nodes' RealMemory (MB): its memory_mb, or its share of the host,
        measured once where a node sets none (components/composition/node_memory.py)."""
        view = config.for_host(host)
        memory: dict[str, pulumi.Input[int]] = {n.name: n.memory_mb for n in view.nodes if n.memory_mb is not None}
        if len(memory) < len(view.nodes):
            size = measure_host(f"{prefix}-host-size", view.network.nat_bridge.name, self.transport, self._moved())
            host_shares = size.apply(lambda measured: shares(config, host, measured))
            memory |= {n.name: host_shares[n.name] for n in view.nodes if n.memory_mb is None}
        return memory

    def _container_memory(self, config: ClusterConfig, nodes) -> dict[str, pulumi.Input[int]]:
        """Each node container's memory limit (MB): its RealMemory and what its daemons keep."""
        margins = {node.name: node_daemon_memory_mb(config, node) for node in nodes}
        return {
            name: pulumi.Output.from_input(self.node_memory[name]).apply(lambda mb, margin=margin: mb + margin)
            for name, margin in margins.items()
        }

    def _bridges_and_image(self, prefix: str, config: ClusterConfig, mounted: list[pulumi.Resource]) -> None:
        cluster, view = config.host_identity(self.host_config), config.for_host(self.host_config)
        # The kernel limits before any container starts (the image's build runs one, too).
        after = [self.gpu_host.packages, self.gpu_host.shared_dir, self.gpu_host.kernel_limits, *mounted]
        self.bridges = Bridges(
            f"{prefix}-bridges",
            cluster,
            view.network,
            opts=self._moved(*after),
            transport=self.transport,
            burst_access=config.burst_access(self.host_config),
        )
        self.image = NodeImage(
            f"{prefix}-image", cluster, config.node_image, opts=self._moved(*after), transport=self.transport
        )

    def _shared_fs(self, prefix: str, config: ClusterConfig, bridges: Bridges | None = None) -> pulumi.Resource:
        """The host's mount of the shared filesystem; on the serving host, first the server
        (after the host's `bridges` where it binds the NAT bridge's address)."""
        host, packages, shared = self.host_config, self.gpu_host.packages, self._shared
        serving = serving_host(config)
        if serving is not None and serving.name == host.name:
            server_after = [packages, *([bridges] if bridges else [])]
            shared.nfs_server = nfs_server(prefix, config, self.transport, server_after, self._moved())
        after = [packages, self.gpu_host.shared_dir, *([shared.nfs_server] if shared.nfs_server else [])]
        efs_address = shared.efs.address if shared.efs else None
        return shared_mount(prefix, config, host, self.transport, after, self._moved(), efs_address)

    def _munge_key(self, prefix: str, config: ClusterConfig) -> pulumi.Resource:
        """Several hosts share one munge key, installed on each host by stdin."""
        return host_command(
            f"{prefix}-munge-key",
            transport=self.transport,
            create=HOST_FILES / "munge_key_install_create.sh",
            delete=HOST_FILES / "munge_key_delete.sh",
            environment={"MUNGE_KEY_FILE": f"{config.host_identity(self.host_config).cluster_dir}/munge.key"},
            stdin=self._shared.munge_key,
            opts=self._moved(self.gpu_host.packages),
        )

    def _containers(self, name: str, config: ClusterConfig) -> dict[str, CudaContainer]:
        """The host's node containers, cloned from its image once its bridges are up."""
        view, gpus = config.for_host(self.host_config), config.gpu_assignment()
        slots = cpu_slots(view.nodes)
        return {
            node.name: CudaContainer(
                f"{name}-{node.name}",
                config.host_identity(self.host_config),
                ContainerSpec(
                    hostname=node.name,
                    nat_address=node.nat_address,
                    cluster_address=node.cluster_address,
                    gpu_devices=gpus[node.name],
                    cpus=node.cpus,
                    cpu_slot=slots[node.name],
                    memory_mb=self.container_memory[node.name],
                ),
                self.platform,
                image=self.image.rootfs,
                opts=self._moved(self.bridges, self.image, *self.late_mounts),
                transport=self.transport,
            )
            for node in view.nodes
        }


def host_containers(config: ClusterConfig, host: ClusterHostConfig) -> list[str]:
    """The containers the cluster has on a host (its preflight checks their names)."""
    cluster, view = config.host_identity(host), config.for_host(host)
    containers = [cluster.container_name(n) for n in [*view.node_names, "image"]]
    if view.web_app:
        containers.append(cluster.container_name(view.web_app.name))
    if view.login:
        containers.append(cluster.container_name(view.login.name))
    if config.accounting and config.accounting_host.name == host.name:
        containers.append(cluster.container_name(config.accounting.name))
    if config.metrics_enabled and host.name == config.controller_host.name:
        containers.append(cluster.container_name(config.metrics.name))
    if config.slurm.controller.placement == "host" and host.name == config.controller_host.name:
        containers.append(cluster.container_name(config.slurm.controller.name))
    return containers
