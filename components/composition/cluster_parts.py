"""The GpuCluster's parts around its core (components/composition/cluster.py): the EC2 site and the burst
cloud, the routes between hosts, a host's Slurm client, the metrics, and how users reach the
hosts and nodes. Each makes children of the cluster from the composed config, under the same
names and parents as when they were methods of GpuCluster."""

import ipaddress
import socket
from pathlib import Path

import pulumi

from components.aws.site import Ec2Site, SiteSpec
from components.burst.cloud import BurstCloud
from components.burst.user_data import render_user_data as render_burst_user_data
from components.common.transport import env_list, host_command
from components.composition.cluster_host import ClusterHostConfig
from components.composition.config import ClusterConfig
from components.containers.registry import StackRegistry
from components.lxc.cuda_container import ContainerSpec, CudaContainer
from components.metrics.prometheus import Metrics, MetricsSetup, ScrapedNode
from components.metrics.render import (
    exporter_address,
    exporter_guard,
    render_alert_rules,
    render_exporter_settings,
    render_prometheus_config,
)
from components.sharedfs.shared_fs import burst_mount
from components.slurm.controller import slurm_client as controller_slurm_client

# The other hosts' Slurm clients are Slurm scripts; routes are the network's.
SLURM_FILES = Path(__file__).parents[1] / "slurm" / "files"
NETWORK_FILES = Path(__file__).parents[1] / "network" / "files"


def ec2_site(name: str, config: ClusterConfig, parent: pulumi.Resource) -> Ec2Site | None:
    """What the EC2 hosts share (network, security group, key pair), if there are any."""
    ec2_hosts = [host for host in config.cluster_hosts if host.is_ec2]
    if not ec2_hosts:
        return None
    spec = SiteSpec(
        cluster=config.name,
        routed_subnets=tuple(host.network.nat_bridge.subnet for host in ec2_hosts),
        web_ports=tuple(sorted({f.host_port for host in ec2_hosts for f in config.for_host(host).all_forwards})),
    )
    return Ec2Site(f"{name}-aws", config.aws, spec, opts=pulumi.ResourceOptions(parent=parent))


def burst_cloud(name: str, config: ClusterConfig, parent: pulumi.Resource) -> tuple[BurstCloud | None, str | None]:
    """The AWS side of the burst partitions, if there are any (Slurm starts the instances), and
    the burst nodes' first-boot user data."""
    if config.burst is None:
        return None, None
    burst = config.burst
    user_data = render_burst_user_data(
        config.controller_address,
        burst.region,
        f"gpucluster/{config.name}/munge-key",
        burst.api_endpoint,
        config.munge_socket,
        people=[user.spec for user in config.users],
        shared_dir=config.controller_host.shared_dir,
        shared_mount=burst_mount(config),
    )
    cloud = BurstCloud(f"{name}-burst", config.name, burst, user_data, opts=pulumi.ResourceOptions(parent=parent))
    return cloud, user_data


def routes(name: str, config: ClusterConfig, cluster: pulumi.ComponentResource) -> dict[str, pulumi.Resource]:
    """Per host: routes to every other host's NAT subnet via that host, and the forwarding
    they need. The controller waits for them, so Slurm traffic crosses hosts."""
    routes = {}
    for host in config.cluster_hosts:
        wanted = config.routes_of(host)
        if not wanted:
            continue
        routes[host.name] = host_command(
            f"{name}-{host.name}-routes",
            transport=cluster.transports[host.name],
            create=NETWORK_FILES / "routes_create.sh",
            delete=NETWORK_FILES / "routes_delete.sh",
            environment={
                "CLUSTER": config.name,
                "CLUSTER_DIR": config.host_cluster_dir(host),
                "NAT_BRIDGE": host.network.nat_bridge.name,
                "NAT_SUBNET": str(host.network.nat_bridge.subnet),
                "ROUTES": env_list(config.route_entries(host)),
            },
            opts=pulumi.ResourceOptions(parent=cluster, depends_on=[cluster.bridges_of[host.name]]),
        )
    return routes


def slurm_client(
    name: str, config: ClusterConfig, host: ClusterHostConfig, cluster: pulumi.ComponentResource
) -> pulumi.Resource:
    """A host's Slurm client, from the node image (controller.slurm_client). The controller's
    host had its client under the controller before: an alias keeps that one (same paths)
    instead of making a second and deleting the first."""
    host_dir = config.host_cluster_dir(host)
    aliases = []
    if host.name == config.controller_host.name:
        controller_urn = cluster.urn.apply(
            lambda urn: f"{urn.rsplit('::', 1)[0]}$gpu-cluster:slurm:SlurmController::{name}-slurm"
        )
        aliases = [pulumi.Alias(name=f"{name}-slurm-client", parent=controller_urn)]
    common = {
        "CLUSTER": config.name,
        "CLUSTER_DIR": host_dir,
        "MUNGE_KEY_FILE": f"{host_dir}/munge.key",
        "MUNGE_SOCKET": config.munge_socket,
    }
    return controller_slurm_client(
        f"{name}-{host.name}-slurm-client",
        common,
        cluster.client_container(config, host),
        cluster.slurm_conf,
        cluster,
        None,
        cluster.transports[host.name],
        host_munge_dir=str(Path(config.host_munge_socket(host)).parent),
        after=[cluster.munge_keys[host.name]],
        aliases=aliases,
    )


def metrics(name: str, config: ClusterConfig, cluster: pulumi.ComponentResource) -> Metrics:
    """Prometheus and the cluster's exporter on the controller's host, a node exporter in
    every node of every host; after slurmctld, whose Slurm the exporter asks. `cluster`: the
    GpuCluster being built (its hosts' containers, platforms, images, bridges and controller)."""
    host = config.controller_host
    setup = MetricsSetup(
        metrics=config.metrics,
        prometheus_config=render_prometheus_config(config),
        alert_rules=render_alert_rules(config.metrics),
        exporter_settings=render_exporter_settings(config),
        exporter_address=exporter_address(config),
        exporter_guard=exporter_guard(config),
    )
    nodes = [
        ScrapedNode(
            name=node.name,
            container=cluster.containers[node.name],
            container_name=config.container_name(node.name),
            nat_address=str(node.nat_address),
            transport=cluster.transports[config.node_host(node).name],
        )
        for node in config.nodes
    ]
    return Metrics(
        f"{name}-metrics",
        config.host_identity(host),
        setup,
        cluster.platforms[host.name],
        image=cluster.images[host.name].rootfs,
        nodes=nodes,
        opts=pulumi.ResourceOptions(
            parent=cluster,
            depends_on=[
                cluster.bridges_of[host.name],
                cluster.images[host.name],
                *cluster.late_mounts[host.name],
                cluster.controller,
                *cluster.routes.values(),
            ],
        ),
        transport=cluster.transports[host.name],
    )


def controller_container(name: str, config: ClusterConfig, cluster: pulumi.ComponentResource) -> CudaContainer:
    """slurmctld's own container (placement 'host'): a clone of the node image on the controller
    host's NAT bridge, without GPUs, so the controller runs its image's Slurm and no node
    shares its CPUs with it; the people are in it (slurmctld maps account members to uids)."""
    host = config.controller_host
    return CudaContainer(
        f"{name}-slurmctld-container",
        config.host_identity(host),
        ContainerSpec(
            hostname=config.slurm.controller.name,
            nat_address=config.controller_address,
            cluster_address=None,
            gpu_devices=[],
        ),
        cluster.platforms[host.name],
        image=cluster.images[host.name].rootfs,
        opts=pulumi.ResourceOptions(
            parent=cluster,
            depends_on=[cluster.bridges_of[host.name], cluster.images[host.name], *cluster.late_mounts[host.name]],
        ),
        transport=cluster.transports[host.name],
    )


def reachable_address(host: ClusterHostConfig, machines: dict) -> pulumi.Input[str]:
    """The address a user reaches a host at: an EC2 instance's SSH address (public with
    ssh_via: public), an SSH host's, the configured one, else this machine's own."""
    if host.name in machines:
        return machines[host.name].ssh_address
    if host.connection.kind == "ssh" and not is_loopback(host.connection.address):
        return host.connection.address
    # A host reached over loopback is this machine: users reach it at its own address.
    return str(host.address) if host.address else this_machine_address()


def host_access(host: ClusterHostConfig, address: pulumi.Input[str]) -> dict:
    """Per host of a multi-host stack: its address, how to log in, and the drift check as it
    runs there (in a checkout of this project)."""
    access = {"address": address, "verify": f"./verify.sh {pulumi.get_stack()} {host.name}"}
    if host.connection.kind in ("ssh", "ec2"):
        port = getattr(host.connection, "port", 22)
        user = host.connection.user
        access["ssh"] = pulumi.Output.concat("ssh ", f"-p {port} " if port != 22 else "", f"{user}@", address)
    return access


def this_machine_address() -> str:
    """This machine's address toward the outside (its default route's source; no packet is
    sent), or its host name when it has no route."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("198.51.100.1", 9))
            return probe.getsockname()[0]
        except OSError:
            return socket.gethostname()


def node_shell(config: ClusterConfig, node) -> str:
    """How to get a shell in a node, on its host."""
    host = config.node_host(node)
    path = f"-P {host.lxc_dir} " if host.lxc_dir != "/var/lib/lxc" else ""
    command = f"lxc-attach {path}-n {config.container_name(node.name)}"
    return f"{command}  (on host {host.name})" if config.multi_host else command


def is_loopback(address: str) -> bool:
    """127.0.0.0/8 or localhost: an SSH connection to this very machine."""
    try:
        return ipaddress.IPv4Address(address).is_loopback
    except ValueError:
        return address == "localhost" or address.endswith(".localhost")


def stack_registry(name: str, config: ClusterConfig, cluster: pulumi.ComponentResource) -> StackRegistry:
    """containers.registry, on the controller's host, after its packages and bridges."""
    host, registry = config.controller_host, config.stack_registry
    return StackRegistry(
        f"{name}-registry",
        config.host_identity(host),
        registry,
        host.network,
        config.image.release,
        push_password=pulumi.Config().require_secret(registry.push_password_secret),
        opts=pulumi.ResourceOptions(
            parent=cluster, depends_on=[cluster.hosts[host.name].packages, cluster.bridges_of[host.name]]
        ),
        transport=cluster.transports[host.name],
    )
