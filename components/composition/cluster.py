"""GpuCluster: the whole GPU Slurm cluster, on one host or several, as one dependency graph."""

from pathlib import Path

import pulumi

from components.app.web_app import WebApp
from components.aws.efs import EfsFileSystem
from components.aws.prices import estimate
from components.burst.controller import BurstPrograms
from components.burst.cost import burst_estimate
from components.common.transport import env_list, generated_secret, host_command
from components.composition.cluster_host import ClusterHostConfig
from components.composition.cluster_parts import (
    burst_cloud,
    controller_container,
    ec2_site,
    host_access,
    metrics,
    node_shell,
    reachable_address,
    routes,
    slurm_client,
    stack_registry,
)
from components.composition.config import ClusterConfig
from components.composition.host_part import HostPart, SharedParts
from components.composition.host_state import render_host_state
from components.composition.node_memory import rendered, resolved
from components.containers.node_files import credentials, mounts_fstab, node_environment, plugstack_conf
from components.containers.node_setup import NodeContainers, node_containers_setup
from components.host.boot_unit import BootUnit
from components.lxc.lxc_conf import cpu_slots
from components.lxc.node_image import CONTAINER_RUNTIME_PACKAGES
from components.network.port_forward import PortForward
from components.sharedfs.config import EfsShare, serving_host
from components.slurm.accounting import AccountingSetup, SlurmAccounts
from components.slurm.config import NodeConfig
from components.slurm.controller import ClientContainer, ControllerPlacement, SlurmController
from components.slurm.login import LoginNode, LoginSetup
from components.slurm.node import SlurmNode
from components.slurm.slurm_conf import render_gres_conf, render_slurm_conf, render_slurmdbd_conf, slurmd_start_plugins

# The cluster-wide health check is a Slurm script (routes, clients and metrics:
# components/composition/cluster_parts.py; a host's own part: components/composition/host_part.py).
SLURM_FILES = Path(__file__).parents[1] / "slurm" / "files"


class GpuCluster(pulumi.ComponentResource):
    """Per host a HostPart (components/composition/host_part.py: preflight, packages, bridges, node image,
    CUDA containers); then Slurm: one controller, slurmd on every node of every host; then the
    services: the web app, the metrics, the forwards; then a boot unit per host.

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
    login_ssh: pulumi.Output[str] | None = None
    """With a login node: how a person reaches it (`ssh -p PORT PERSON@HOST`)."""
    cost: pulumi.Output[dict] | None = None
    """With EC2 hosts: the instances' estimated hourly and monthly cost (components/aws/prices.py)."""
    registry_output: pulumi.Output[dict] | None = None
    """With containers.registry: where people pull, where the operator pushes, and its CA."""
    boot_command: pulumi.Output[str]

    def __init__(self, name: str, config: ClusterConfig, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-cluster:cluster:GpuCluster", name, None, opts)
        self._cluster_wide(name, config)
        self._host_parts(name, config)
        self._slurm(name, config)
        self._services(name, config)
        self._boot_units(name, config)
        self._outputs(config)

    def _cluster_wide(self, name: str, config: ClusterConfig) -> None:
        """What the hosts share, made before them: the munge key of several hosts, the EC2
        site, EFS, the burst cloud, and the cost estimate."""
        child = pulumi.ResourceOptions(parent=self)
        # Several hosts share one munge key: generated once, kept only as an encrypted secret
        # in the state, installed on each host by stdin. One host makes its own on the host.
        key = generated_secret(f"{name}-munge-key", length=1024, opts=child) if config.multi_host else None
        self.ec2_site = ec2_site(name, config, self)
        # On EC2 the shared filesystem may be EFS: made before the hosts that mount it.
        self.efs = None
        if isinstance(config.shared_fs, EfsShare):
            self.efs = EfsFileSystem(
                f"{name}-efs", config.aws, config.name, config.shared_fs, self.ec2_site, opts=child
            )
        self.shared = SharedParts(self, key, self.ec2_site, self.efs)
        if self.ec2_site is not None:
            types = [host.connection.instance_type for host in config.cluster_hosts if host.is_ec2]
            self.cost = pulumi.Output.from_input(estimate(config.aws.region, types, config.aws.prices))
        self.burst, self.burst_user_data = burst_cloud(name, config, self)
        if self.burst is not None:
            cost = self.cost if self.cost is not None else pulumi.Output.from_input({})
            self.cost = cost.apply(lambda c: {**c, "burst": burst_estimate(config.burst)})

    def _host_parts(self, name: str, config: ClusterConfig) -> None:
        """One HostPart per host (the serving host's first: every mount waits for its server),
        then the routes between hosts; the parts' pieces by host for the stages after them."""
        parts = [
            HostPart(name, config, host, self.shared, pulumi.ResourceOptions(parent=self))
            for host in serving_first(config)
        ]
        self.parts = {part.host_config.name: part for part in parts}
        self.nfs_server = self.shared.nfs_server
        self.machines = {host: part.machine for host, part in self.parts.items() if part.machine}
        self.transports = {host: part.transport for host, part in self.parts.items()}
        self.hosts = {host: part.gpu_host for host, part in self.parts.items()}
        self.host_users = {host: part.users for host, part in self.parts.items()}
        self.bridges_of = {host: part.bridges for host, part in self.parts.items()}
        self.images = {host: part.image for host, part in self.parts.items()}
        self.late_mounts = {host: part.late_mounts for host, part in self.parts.items()}
        # Every node's RealMemory: its memory_mb, or its share of its host once that is measured.
        self.node_memory = {node: mb for part in parts for node, mb in part.node_memory.items()}
        self.munge_keys = {host: part.munge_key for host, part in self.parts.items() if part.munge_key}
        self.platforms = {host: part.platform for host, part in self.parts.items()}
        self.containers = {node: c for part in parts for node, c in part.containers.items()}
        self.routes = routes(name, config, self) if config.multi_host or config.burst else {}
        # The first host's parts, for the one-host outputs.
        first = config.cluster_hosts[0].name
        self.host, self.bridges, self.image = self.hosts[first], self.bridges_of[first], self.images[first]

    def _slurm(self, name: str, config: ClusterConfig) -> None:
        """One controller; with several hosts a Slurm client on every host; accounting and its
        accounts; the burst programs; slurmd on every node; then the health gate."""
        controller_host = config.controller_host
        self.controller_hostname = controller_hostname(config)
        # placement 'host': slurmctld in a container of its own (the node image's Slurm).
        self.controller_ct = None if config.controller_node else controller_container(name, config, self)
        slurm_conf = self.slurm_conf = rendered(
            resolved(config, self.node_memory), lambda known: render_slurm_conf(known, self.controller_hostname)
        )
        # The site's registry accounts, read once for every node (jobs in container images).
        self.registry_accounts = credentials(config.containers) if config.containers_enabled else None
        # The stack's own registry: every node's setup trusts its CA.
        self.registry = stack_registry(name, config, self) if config.stack_registry else None
        # Each node's setup for them, before slurmctld (its prolog, Pyxis) and its slurmd.
        self.containers_setups = {
            node.name: self._containers_setup(name, config, node) for node in config.nodes if config.containers_enabled
        }
        # Several hosts: every host has a Slurm client (sinfo, srun there, run in one of its
        # containers from the node image), the controller's host included, so a client never
        # moves with the controller.
        clients = {
            host.name: slurm_client(name, config, host, self)
            for host in (config.cluster_hosts if config.multi_host else [])
        }
        self.controller = self._controller(name, config, slurm_conf, clients)
        self.accounts = self._accounts(name, config) if config.accounting else None
        self.clients = clients or {controller_host.name: self.controller.client}
        self.burst_programs = self._burst_programs(name, config) if self.burst is not None else None
        self.slurm_nodes = [self._slurm_node(name, config, node, slurm_conf) for node in config.nodes]
        # Fails the apply, loudly, when a node (of any host) does not serve or a test job
        # cannot run; never waits on users' jobs (components/slurm/files/health_check.sh).
        self.health = host_command(
            f"{name}-health",
            transport=self.transports[controller_host.name],
            create=SLURM_FILES / "health_check.sh",
            environment={"CLUSTER_DIR": config.cluster_dir, "NODES": config.hostlist},
            triggers=[config.hostlist],
            opts=pulumi.ResourceOptions(parent=self, depends_on=self.slurm_nodes),
        )

    def _controller(
        self, name: str, config: ClusterConfig, slurm_conf: pulumi.Input[str], clients: dict[str, pulumi.Resource]
    ) -> SlurmController:
        node, host = config.controller_node, config.controller_host
        # slurmctld maps the people of the accounts to uids where it runs.
        deps = [self.hosts[host.name].packages, *self.host_users[host.name], *self.routes.values()]
        container = self.containers[node.name] if node else self.controller_ct
        return SlurmController(
            f"{name}-slurm",
            config.host_identity(host),
            ControllerPlacement(
                hostname=self.controller_hostname,
                address=config.controller_address,
                container=config.controller_container,
            ),
            slurm_conf=slurm_conf,
            gres_conf=render_gres_conf(config),
            container=container.lxc,
            lives_on=container.lives_on,
            accounting=self._accounting(config, clients) if config.accounting else None,
            opts=pulumi.ResourceOptions(parent=self, depends_on=deps),
            transport=self.transports[host.name],
            munge_key=self.munge_keys.get(host.name),
            client=clients.get(host.name),
            client_container=self.client_container(config, host),
            plugstack_conf=plugstack_conf() if config.containers_enabled else None,
            # slurm.conf's prolog and plugstack.conf's `required` Pyxis reach every slurmd when
            # slurmctld applies them: each node has both by then, also one of an older image.
            nodes_ready=tuple(self.containers_setups.values()),
        )

    def client_container(self, config: ClusterConfig, host: ClusterHostConfig) -> ClientContainer:
        """The container that runs a host's Slurm commands: the controller's own on its host
        (placement 'host'), else ClusterConfig.client_node's."""
        image = config.host_identity(host).container_name("image") if config.containers_enabled else None
        if self.controller_ct is not None and host.name == config.controller_host.name:
            return ClientContainer(
                config.controller_container, self.controller_ct.lxc, self.controller_ct.lives_on, image
            )
        node = config.client_node(host)
        if node is None:
            raise ValueError(f"host {host.name!r} holds no node to run the cluster's Slurm commands in")
        container = self.containers[node.name]
        setup = self.containers_setups.get(node.name)
        return ClientContainer(config.container_name(node.name), container.lxc, container.lives_on, image, setup)

    def _accounting(self, config: ClusterConfig, clients: dict[str, pulumi.Resource]) -> AccountingSetup:
        """The database's host: the controller's unless `accounting.host` names another."""
        database = config.accounting_host
        return AccountingSetup(
            config=config.accounting,
            network=database.network,
            release=config.image.release,
            users=tuple(config.users),
            slurmdbd_conf=render_slurmdbd_conf(config),
            after=(self.hosts[database.name].packages, self.bridges_of[database.name]),
            cluster=config.host_identity(database) if config.multi_host else None,
            transport=self.transports[database.name],
            munge_key=self.munge_keys.get(database.name),
            client=clients.get(database.name),
        )

    def _accounts(self, name: str, config: ClusterConfig) -> SlurmAccounts:
        """After slurmctld: it registers the cluster's TRES (gres/gpu) that GPU limits name."""
        host = config.controller_host
        deps = [self.controller, *self.containers.values(), *self.host_users[host.name]]
        return SlurmAccounts(
            f"{name}-accounts",
            config.host_identity(host),
            config.accounting,
            opts=pulumi.ResourceOptions(parent=self, depends_on=deps),
            transport=self.transports[host.name],
        )

    def _burst_programs(self, name: str, config: ClusterConfig) -> BurstPrograms:
        host = config.controller_host
        return BurstPrograms(
            f"{name}-burst-programs",
            config.name,
            config.burst,
            self.burst,
            self.burst_user_data,
            munge_key_file=f"{config.host_cluster_dir(host)}/munge.key",
            container=config.controller_container,
            slurm_conf=None,
            transport=self.transports[host.name],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.controller]),
        )

    def _slurm_node(
        self, name: str, config: ClusterConfig, node: NodeConfig, slurm_conf: pulumi.Input[str]
    ) -> SlurmNode:
        host = config.node_host(node)
        deps = [self.containers[node.name], self.controller]
        if config.multi_host:
            deps += [self.munge_keys[host.name], self.clients[host.name]]
        return SlurmNode(
            f"{name}-{node.name}-slurm",
            config.host_identity(host),
            node,
            controller_address=config.controller_address,
            container=self.containers[node.name].lxc,
            gpu_devices=config.gpu_assignment()[node.name],
            health_check=config.slurm.health_check,
            start_plugins=rendered(slurm_conf, slurmd_start_plugins),
            cpuset=f"{cpu_slots(config.for_host(host).nodes)[node.name]},{node.cpus}",
            containers_setup=self.containers_setups.get(node.name),
            opts=pulumi.ResourceOptions(parent=self, depends_on=deps),
            transport=self.transports[host.name],
        )

    def _containers_setup(self, name: str, config: ClusterConfig, node: NodeConfig) -> pulumi.Resource:
        """A node's part of jobs in container images: Enroot's files (shared_dir as its host
        has it) and the site's registry accounts."""
        host = config.node_host(node)
        environment = {
            **node_environment(config.containers),
            "MOUNTS": mounts_fstab(host.shared_dir),
            # A node of an image built without them installs Enroot and Pyxis from the image's build.
            "IMAGE": config.host_identity(host).container_name("image"),
            "RUNTIME_PACKAGES": env_list(CONTAINER_RUNTIME_PACKAGES),
            **({"REGISTRY_CA_STACK": self.registry.ca_cert} if self.registry else {}),
        }
        slurm_node = f"{name}-{node.name}-slurm"
        return node_containers_setup(
            f"{slurm_node}-containers",
            config.host_identity(host),
            node.name,
            self.containers[node.name].lxc,
            NodeContainers(environment, self.registry_accounts),
            parent=self,
            old_parent=self.urn.apply(
                lambda urn: f"{urn.rsplit('::', 1)[0]}$gpu-cluster:slurm:SlurmNode::{slurm_node}"
            ),
            transport=self.transports[host.name],
        )

    def _services(self, name: str, config: ClusterConfig) -> None:
        """The web app, the metrics, the login node, and the port forwards to what answers behind them."""
        self.web_app = self._web_app(name, config) if config.web_app else None
        self.login = self._login(name, config) if config.login else None
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

    def _web_app(self, name: str, config: ClusterConfig) -> WebApp:
        host = config.node_host(config.web_app).name
        return WebApp(
            f"{name}-web",
            config.host_identity(config.host_named(host)),
            config.web_app,
            self.platforms[host],
            image=self.images[host].rootfs,
            opts=pulumi.ResourceOptions(
                parent=self, depends_on=[self.bridges_of[host], self.images[host], *self.late_mounts[host]]
            ),
            transport=self.transports[host],
            prometheus_url=f"http://{config.metrics.nat_address}:{config.metrics.port}"
            if config.metrics_enabled
            else "",
        )

    def _login(self, name: str, config: ClusterConfig) -> LoginNode:
        """After slurmctld: its setup installs the munge key and submits to it."""
        host = config.node_host(config.login).name
        munge_key = [self.munge_keys[host]] if host in self.munge_keys else []
        return LoginNode(
            f"{name}-login",
            config.host_identity(config.host_named(host)),
            config.login,
            self.platforms[host],
            LoginSetup(
                slurm_conf=self.slurm_conf,
                # After its host's nodes' CPUs: a person's build takes none of a node's while the host has enough.
                cpu_slot=sum(node.cpus for node in config.for_host(config.host_named(host)).nodes),
                after=(self.controller, *munge_key),
                plugstack_conf=plugstack_conf() if config.containers_enabled else None,
            ),
            image=self.images[host].rootfs,
            opts=pulumi.ResourceOptions(
                parent=self, depends_on=[self.bridges_of[host], self.images[host], *self.late_mounts[host]]
            ),
            transport=self.transports[host],
        )

    def _boot_units(self, name: str, config: ClusterConfig) -> None:
        """Written last, deleted first: a destroy cut short is not brought back at the next boot.
        One per host: each host brings back its own part."""
        everything = [self.health, *self.forwards, *([self.web_app] if self.web_app else [])]
        everything += [self.accounts] if self.accounts else []
        everything += [self.metrics] if self.metrics else []
        everything += [self.login] if self.login else []
        self.boots = {
            host.name: BootUnit(
                f"{name}-{host.name}-boot" if config.multi_host else f"{name}-boot",
                config.host_identity(host),
                self._host_state(config, host),
                opts=pulumi.ResourceOptions(parent=self, depends_on=everything),
                transport=self.transports[host.name],
            )
            for host in config.cluster_hosts
        }
        self.boot = self.boots[config.cluster_hosts[0].name]

    def _outputs(self, config: ClusterConfig) -> None:
        """The stack's outputs (__main__.py exports them)."""
        multi, gpus = config.multi_host, config.gpu_assignment()
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
        web_host = config.node_host(config.web_app).name if config.web_app else None
        self.web_url = pulumi.Output.from_input(
            pulumi.Output.concat("http://", self.host_addresses[web_host], f":{config.web_app.host_port}/")
            if config.web_app
            else ""
        )
        self.registry_output = self.registry.summary if self.registry else None
        if config.login:
            login_host = self.host_addresses[config.node_host(config.login).name]
            self.login_ssh = pulumi.Output.concat(f"ssh -p {config.login.host_port} <person>@", login_host)
        self.hosts_config = (
            {host.name: host_access(host, self.host_addresses[host.name]) for host in config.cluster_hosts}
            if multi
            else {}
        )
        self.hosts_access = pulumi.Output.from_input(self.hosts_config)
        # The host's Slurm client: the node image's commands, run in the cluster's container.
        self.slurm_env = pulumi.Output.from_input(f'export PATH="{config.cluster_dir}/bin:$PATH"')
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
                **({"registry": self.registry_output} if self.registry_output is not None else {}),
            }
        )

    def _host_state(self, config: ClusterConfig, host: ClusterHostConfig) -> pulumi.Input[str]:
        """The host's state file; with EFS it names the mount target's address, known once made."""
        if self.efs is None:
            return render_host_state(config, host)
        return self.efs.address.apply(lambda address: render_host_state(config, host, address))

    @staticmethod
    def _target_host(config: ClusterConfig, target: str) -> ClusterHostConfig:
        if config.web_app and target == config.web_app.name:
            return config.node_host(config.web_app)
        if config.login and target == config.login.name:
            return config.node_host(config.login)
        return config.node_host(next(n for n in config.nodes if n.name == target))

    def _forward_target(self, config: ClusterConfig, target: str) -> pulumi.Resource:
        """A forward waits for what answers behind it: the app, the login node's sshd, or the node's slurmd."""
        if self.web_app and config.web_app and target == config.web_app.name:
            return self.web_app.service
        if self.login and config.login and target == config.login.name:
            return self.login.setup
        return self.containers[target]


def serving_first(config: ClusterConfig) -> list[ClusterHostConfig]:
    """The hosts, the one serving the shared filesystem first: every mount waits for its server."""
    serving = serving_host(config)
    hosts = config.cluster_hosts
    return sorted(hosts, key=lambda host: host.name != serving.name) if serving else hosts


def controller_hostname(config: ClusterConfig) -> str:
    """The host name slurmctld answers by: its node's, or its own container's."""
    node = config.controller_node
    return node.name if node else config.slurm.controller.name
