"""GpuCluster: the whole GPU Slurm cluster, on one host or several, as one dependency graph."""

import socket
from pathlib import Path

import pulumi

from components.app.web_app import WebApp
from components.aws.efs import EfsFileSystem
from components.aws.instance import Ec2Host, InstanceSpec
from components.aws.prices import estimate
from components.burst.controller import BurstPrograms
from components.burst.cost import burst_estimate
from components.cluster_host import ClusterHostConfig
from components.cluster_parts import (
    burst_cloud,
    ec2_site,
    host_access,
    metrics,
    node_shell,
    reachable_address,
    routes,
    slurm_client,
)
from components.config import ClusterConfig
from components.host.boot_unit import BootUnit
from components.host.gpu_host import GpuHost
from components.host_state import render_host_state
from components.lxc.cuda_container import ContainerPlatform, CudaContainer
from components.lxc.lxc_conf import ContainerSpec, cpu_slots
from components.lxc.node_image import NodeImage
from components.network.bridges import Bridges
from components.network.port_forward import PortForward
from components.sharedfs.config import EfsShare, ServedNfs, serving_host
from components.sharedfs.shared_fs import host_packages, nfs_server, served_directory, shared_mount
from components.slurm.accounting import AccountingSetup, SlurmAccounts
from components.slurm.controller import ControllerPlacement, SlurmController
from components.slurm.node import SlurmNode
from components.slurm.slurm_conf import (
    NODE_DAEMON_MEMORY_MB,
    SLURMCTLD_PORT,
    render_gres_conf,
    render_slurm_conf,
    render_slurmdbd_conf,
    slurmd_start_plugins,
)
from components.transport import Machine, Transport, connect, generated_secret, host_command

# The cluster-wide health check and the other hosts' Slurm clients are Slurm scripts; the
# munge key's installation is the host's (routes, clients and metrics: components/cluster_parts.py).
SLURM_FILES = Path(__file__).parent / "slurm" / "files"
HOST_FILES = Path(__file__).parent / "host" / "files"


class GpuCluster(pulumi.ComponentResource):
    """Per host: preflight, packages, bridges, node image, CUDA containers; then one Slurm
    controller, slurmd on every node of every host, the web app and its forward.

    The order comes from the graph: preflight -> packages -> bridges and image ->
    containers (in parallel, no edges between them) -> controller -> slurmd on every node
    -> health gate; web app container -> app -> port forward.

    This is where the whole ClusterConfig is sliced: each component gets the part it models.
    A one-host stack names its resources `<name>-...`; with `hosts`, a host's resources carry
    the host's name (`<name>-<host>-...`) and reach it by its transport (local or SSH). A
    retired host keeps its whole part, unchanged, marked to leave the state without running.
    """

    controller_address: pulumi.Output[str]
    nodes: pulumi.Output[dict]
    node_list: pulumi.Output[str]
    web_url: pulumi.Output[str]
    slurm_env: pulumi.Output[str]
    node_shells: pulumi.Output[dict]
    host_facts: pulumi.Output[dict]
    cost: pulumi.Output[dict] | None = None
    """With EC2 hosts: the instances' estimated hourly and monthly cost (components/aws/prices.py)."""
    boot_command: pulumi.Output[str]

    def __init__(self, name: str, config: ClusterConfig, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-cluster:cluster:GpuCluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        multi = config.multi_host
        gpus = config.gpu_assignment()
        users = tuple(config.users)

        # Several hosts share one munge key: generated once, kept only as an encrypted secret
        # in the state, installed on each host by stdin. One host makes its own on the host.
        key = generated_secret(f"{name}-munge-key", length=1024, opts=child) if multi else None
        self.transports: dict[str, Transport] = {}
        self.hosts: dict[str, GpuHost] = {}
        self.bridges_of: dict[str, Bridges] = {}
        self.images: dict[str, NodeImage] = {}
        self.munge_keys: dict[str, pulumi.Resource] = {}
        self.containers: dict[str, CudaContainer] = {}
        self.platforms: dict[str, ContainerPlatform] = {}
        self.host_users: dict[str, list[pulumi.Resource]] = {}
        # What a container binding shared_dir (node, web app, Prometheus) waits for beyond its
        # host's bridges and image: the host's shared mount where it is made after the bridges.
        self.late_mounts: dict[str, list[pulumi.Resource]] = {}
        self.ec2_site, self.machines = ec2_site(name, config, self), {}
        # On EC2 the shared filesystem may be EFS: made before the hosts that mount it.
        self.efs = None
        if isinstance(config.shared_fs, EfsShare):
            self.efs = EfsFileSystem(
                f"{name}-efs", config.aws, config.name, config.shared_fs, self.ec2_site, opts=child
            )
        if self.ec2_site is not None:
            types = [host.connection.instance_type for host in config.cluster_hosts if host.is_ec2]
            self.cost = pulumi.Output.from_input(estimate(config.aws.region, types, config.aws.prices))
        self.burst, self.burst_user_data = burst_cloud(name, config, self)
        if self.burst is not None:
            cost = self.cost if self.cost is not None else pulumi.Output.from_input({})
            self.cost = cost.apply(lambda c: {**c, "burst": burst_estimate(config.burst)})
        self.nfs_server = None
        for host in serving_first(config):
            prefix = f"{name}-{host.name}" if multi else name
            view = config.for_host(host)
            cluster = config.host_identity(host)
            machine = None
            if host.is_ec2:
                # The instance first; its commands wait for SSH on it and go with it.
                ec2 = Ec2Host(
                    f"{prefix}-ec2",
                    config.aws,
                    InstanceSpec(
                        config.name,
                        host.connection,
                        host.address,
                        host.network.nat_bridge.subnet,
                        (host.state_dir, host.shared_dir, host.lxc_dir),
                    ),
                    self.ec2_site,
                    opts=child,
                )
                self.machines[host.name] = ec2
                machine = Machine(ec2.ssh_address, ec2.host_public_key, ec2.instance)
            transport = connect(prefix, config.name, host, child, machine=machine)
            self.transports[host.name] = transport
            containers = [cluster.container_name(n) for n in [*view.node_names, "image"]]
            if view.web_app:
                containers.append(cluster.container_name(view.web_app.name))
            if config.accounting and config.accounting_host.name == host.name:
                containers.append(cluster.container_name(config.accounting.name))
            controller_here = host.name == config.controller_host.name
            if config.metrics_enabled and controller_here:
                containers.append(cluster.container_name(config.metrics.name))
            gpu_host = GpuHost(
                f"{prefix}-host",
                cluster,
                view.host,
                view.network,
                gpu_devices=view.gpu.devices,
                control_devices=view.gpu.control_devices,
                node_cpus=max((node.cpus for node in view.nodes), default=1),
                node_memory_mb=sum(node.memory + NODE_DAEMON_MEMORY_MB for node in view.nodes),
                host_ports=[forward.host_port for forward in view.all_forwards],
                controller_port=SLURMCTLD_PORT if controller_here and not config.controller_node else None,
                containers=containers,
                stand_in_gpus=view.gpu.stand_in.count if view.gpu.stand_in else 0,
                device_dir=config.host_device_dir(host),
                driver_files=view.gpu.driver_files,
                users=users,
                extra_packages=host_packages(config, host),
                served=served_directory(config, host),
                opts=child,
                transport=transport,
            )
            self.hosts[host.name] = gpu_host
            self.host_users[host.name] = [gpu_host.users] if gpu_host.users else []
            # With a shared filesystem, the nodes bind its mount: mounted before bridges and image.
            # A one-host stack serves its export at its NAT bridge's address (for its burst nodes):
            # there the bridges come first, then the server, the mount, and the containers.
            late = not multi and isinstance(config.shared_fs, ServedNfs)
            mounted = (
                [self._shared_fs(prefix, config, host, transport, gpu_host)] if config.shared_fs and not late else []
            )
            after_packages = pulumi.ResourceOptions(
                parent=self, depends_on=[gpu_host.packages, gpu_host.shared_dir, *mounted]
            )
            bridges = Bridges(
                f"{prefix}-bridges", cluster, view.network, after_packages, transport, config.burst_access(host)
            )
            image = NodeImage(f"{prefix}-image", cluster, config.image, opts=after_packages, transport=transport)
            self.bridges_of[host.name], self.images[host.name] = bridges, image
            self.late_mounts[host.name] = (
                [self._shared_fs(prefix, config, host, transport, gpu_host, bridges)] if late else []
            )
            if key is not None:
                self.munge_keys[host.name] = host_command(
                    f"{prefix}-munge-key",
                    transport=transport,
                    create=HOST_FILES / "munge_key_install_create.sh",
                    delete=HOST_FILES / "munge_key_delete.sh",
                    environment={"MUNGE_KEY_FILE": f"{cluster.cluster_dir}/munge.key"},
                    stdin=key,
                    opts=pulumi.ResourceOptions(parent=self, depends_on=[gpu_host.packages]),
                )
            platform = ContainerPlatform(
                network=view.network,
                gpu=view.gpu,
                image=config.image,
                shared_dir=view.host.shared_dir,
                users=users,
            )
            self.platforms[host.name] = platform
            slots = cpu_slots(view.nodes)
            for node in view.nodes:
                self.containers[node.name] = CudaContainer(
                    f"{name}-{node.name}",
                    cluster,
                    ContainerSpec(
                        hostname=node.name,
                        nat_address=node.nat_address,
                        cluster_address=node.cluster_address,
                        gpu_devices=gpus[node.name],
                        cpus=node.cpus,
                        cpu_slot=slots[node.name],
                        memory_mb=node.memory + NODE_DAEMON_MEMORY_MB,
                    ),
                    platform,
                    image=image.rootfs,
                    opts=pulumi.ResourceOptions(parent=self, depends_on=[bridges, image, *self.late_mounts[host.name]]),
                    transport=transport,
                )
        self.routes = routes(name, config, self) if multi or config.burst else {}
        # The first host's parts, for the one-host outputs.
        first = config.cluster_hosts[0].name
        self.host, self.bridges, self.image = self.hosts[first], self.bridges_of[first], self.images[first]

        controller_node = config.controller_node
        controller_host = config.controller_host
        if controller_node:
            controller_hostname = controller_node.name
        elif multi:
            controller_hostname = controller_host.hostname
        else:
            controller_hostname = socket.gethostname().split(".")[0]
        # slurmctld maps the people of the accounts to uids where it runs.
        host_users = self.host_users[controller_host.name]
        controller_deps = [self.hosts[controller_host.name].packages, *host_users, *self.routes.values()]
        # Several hosts: every host has the cluster's munged and a slurm.conf for its Slurm
        # clients (sinfo, srun there; a slurmd's create waits there for its node to register),
        # the controller's host included, so a client never moves with the controller.
        clients = {
            host.name: slurm_client(name, config, host, controller_hostname, self)
            for host in (config.cluster_hosts if multi else [])
        }
        accounting = None
        if config.accounting:
            # The database's host (the controller's unless `accounting.host` names another).
            database = config.accounting_host
            accounting = AccountingSetup(
                config=config.accounting,
                network=database.network,
                release=config.image.release,
                users=users,
                slurmdbd_conf=render_slurmdbd_conf(config),
                after=(self.hosts[database.name].packages, self.bridges_of[database.name]),
                cluster=config.host_identity(database) if multi else None,
                transport=self.transports[database.name],
                munge_key=self.munge_keys.get(database.name),
                client=clients.get(database.name),
            )
        slurm_conf = render_slurm_conf(config, controller_hostname)
        self.controller = SlurmController(
            f"{name}-slurm",
            config.host_identity(controller_host),
            ControllerPlacement(
                hostname=controller_hostname,
                address=config.controller_address,
                container=config.container_name(controller_node.name) if controller_node else None,
            ),
            slurm_conf=slurm_conf,
            gres_conf=render_gres_conf(config),
            container=self.containers[controller_node.name].lxc if controller_node else None,
            lives_on=self.containers[controller_node.name].lives_on if controller_node else None,
            accounting=accounting,
            opts=pulumi.ResourceOptions(parent=self, depends_on=controller_deps),
            transport=self.transports[controller_host.name],
            munge_key=self.munge_keys.get(controller_host.name),
            client=clients.get(controller_host.name),
        )
        # Accounts after slurmctld: it registers the cluster's TRES (gres/gpu) that GPU limits name.
        self.accounts = None
        if config.accounting:
            self.accounts = SlurmAccounts(
                f"{name}-accounts",
                config.host_identity(controller_host),
                config.accounting,
                opts=pulumi.ResourceOptions(
                    parent=self, depends_on=[self.controller, *self.containers.values(), *host_users]
                ),
                transport=self.transports[controller_host.name],
            )
        self.clients = clients or {controller_host.name: self.controller.client}
        self.burst_programs = None
        if self.burst is not None:
            self.burst_programs = BurstPrograms(
                f"{name}-burst-programs",
                config.name,
                config.burst,
                self.burst,
                self.burst_user_data,
                munge_key_file=f"{config.host_cluster_dir(controller_host)}/munge.key",
                container=config.container_name(controller_node.name) if controller_node else None,
                slurm_conf=None if controller_node else f"{config.cluster_dir}/controller/slurm.conf",
                transport=self.transports[controller_host.name],
                opts=pulumi.ResourceOptions(parent=self, depends_on=[self.controller]),
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
                    config.host_identity(host),
                    node,
                    controller_address=config.controller_address,
                    container=self.containers[node.name].lxc,
                    gpu_devices=gpus[node.name],
                    health_check=config.slurm.health_check,
                    start_plugins=slurmd_start_plugins(slurm_conf),
                    cpuset=f"{cpu_slots(config.for_host(host).nodes)[node.name]},{node.cpus}",
                    opts=pulumi.ResourceOptions(parent=self, depends_on=deps),
                    transport=self.transports[host.name],
                )
            )
        # Fails the apply, loudly, when a node (of any host) does not serve or a test job
        # cannot run; never waits on users' jobs (components/slurm/files/health_check.sh).
        self.health = host_command(
            f"{name}-health",
            transport=self.transports[controller_host.name],
            create=SLURM_FILES / "health_check.sh",
            environment={
                "SLURM_CONF": f"{config.cluster_dir}/slurm.conf",
                "NODES": config.hostlist,
            },
            triggers=[config.hostlist],
            opts=pulumi.ResourceOptions(parent=self, depends_on=self.slurm_nodes),
        )

        self.web_app = None
        web_host = config.node_host(config.web_app) if config.web_app else None
        if config.web_app:
            self.web_app = WebApp(
                f"{name}-web",
                config.host_identity(web_host),
                config.web_app,
                self.platforms[web_host.name],
                image=self.images[web_host.name].rootfs,
                opts=pulumi.ResourceOptions(
                    parent=self,
                    depends_on=[
                        self.bridges_of[web_host.name],
                        self.images[web_host.name],
                        *self.late_mounts[web_host.name],
                    ],
                ),
                transport=self.transports[web_host.name],
                prometheus_url=f"http://{config.metrics.nat_address}:{config.metrics.port}"
                if config.metrics_enabled
                else "",
            )
        self.metrics = metrics(name, config, self) if config.metrics_enabled else None
        self.forwards = []
        for forward in config.all_forwards:
            host = self._target_host(config, forward.target)
            self.forwards.append(
                PortForward(
                    f"{name}-fwd-{forward.host_port}",
                    config.host_identity(host),
                    forward,
                    config.target_address(forward.target),
                    opts=pulumi.ResourceOptions(parent=self, depends_on=[self._forward_target(config, forward.target)]),
                    transport=self.transports[host.name],
                )
            )

        # Written last, deleted first: a destroy cut short is not brought back at the next boot.
        # One per host: each host brings back its own part.
        everything = [self.health, *self.forwards, *([self.web_app] if self.web_app else [])]
        everything += [self.accounts] if self.accounts else []
        everything += [self.metrics] if self.metrics else []
        self.boots = {
            host.name: BootUnit(
                f"{name}-{host.name}-boot" if multi else f"{name}-boot",
                config.host_identity(host),
                self._host_state(config, host),
                opts=pulumi.ResourceOptions(parent=self, depends_on=everything),
                transport=self.transports[host.name],
            )
            for host in config.cluster_hosts
        }
        self.boot = self.boots[first]

        self.controller_address = self.controller.address
        self.nodes = pulumi.Output.from_input(
            {
                node.name: {
                    "container": config.container_name(node.name),
                    "nat_address": str(node.nat_address),
                    "cluster_address": str(node.cluster_address),
                    "gpus": gpus[node.name],
                    **({"host": config.node_host(node).name} if multi else {}),
                }
                for node in config.nodes
            }
        )
        self.node_list = pulumi.Output.from_input(config.hostlist)
        # Where a user reaches each host: the web app's forwarded port answers there, not on a bridge.
        self.host_addresses = {host.name: reachable_address(host, self.machines) for host in config.cluster_hosts}
        self.web_url = pulumi.Output.from_input(
            pulumi.Output.concat("http://", self.host_addresses[web_host.name], f":{config.web_app.host_port}/")
            if config.web_app
            else ""
        )
        self.hosts_config = (
            {host.name: host_access(host, self.host_addresses[host.name]) for host in config.cluster_hosts}
            if multi
            else {}
        )
        self.hosts_access = pulumi.Output.from_input(self.hosts_config)
        self.slurm_env = pulumi.Output.from_input(f"export SLURM_CONF={config.cluster_dir}/slurm.conf")
        self.node_shells = pulumi.Output.from_input({node.name: node_shell(config, node) for node in config.nodes})
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
                **({"cost": self.cost} if self.cost is not None else {}),
            }
        )

    def _host_state(self, config: ClusterConfig, host: ClusterHostConfig) -> pulumi.Input[str]:
        """The host's state file; with EFS it names the mount target's address, known once made."""
        if self.efs is None:
            return render_host_state(config, host)
        return self.efs.address.apply(lambda address: render_host_state(config, host, address))

    def _shared_fs(
        self,
        prefix: str,
        config: ClusterConfig,
        host: ClusterHostConfig,
        transport: Transport,
        gpu_host: GpuHost,
        bridges: Bridges | None = None,
    ) -> pulumi.Resource:
        """The host's mount of the shared filesystem; on the serving host, first the server
        (after the host's `bridges` where it binds the NAT bridge's address)."""
        if serving_host(config) is not None and serving_host(config).name == host.name:
            server_after = [gpu_host.packages, *([bridges] if bridges else [])]
            self.nfs_server = nfs_server(prefix, config, transport, server_after, self)
        after = [gpu_host.packages, gpu_host.shared_dir, *([self.nfs_server] if self.nfs_server else [])]
        return shared_mount(prefix, config, host, transport, after, self, self.efs.address if self.efs else None)

    @staticmethod
    def _target_host(config: ClusterConfig, target: str) -> ClusterHostConfig:
        if config.web_app and target == config.web_app.name:
            return config.node_host(config.web_app)
        return config.node_host(next(n for n in config.nodes if n.name == target))

    def _forward_target(self, config: ClusterConfig, target: str) -> pulumi.Resource:
        """A forward waits for what answers behind it: the app, or the node's slurmd."""
        if self.web_app and config.web_app and target == config.web_app.name:
            return self.web_app.service
        return self.containers[target]


def serving_first(config: ClusterConfig) -> list[ClusterHostConfig]:
    """The hosts, the one serving the shared filesystem first: every mount waits for its server."""
    serving = serving_host(config)
    hosts = config.cluster_hosts
    return sorted(hosts, key=lambda host: host.name != serving.name) if serving else hosts
