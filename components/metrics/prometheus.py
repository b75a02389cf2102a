"""Metrics: Prometheus in a container of its own, the cluster's Slurm and GPU exporter on the
controller's host, and a node exporter in every node."""

from dataclasses import dataclass
from pathlib import Path

import pulumi

from components.common.config_types import ClusterIdentity
from components.common.options import child_options
from components.common.transport import Transport, host_command
from components.lxc.cuda_container import ContainerPlatform, CudaContainer
from components.lxc.lxc_conf import ContainerSpec
from components.metrics.config import MetricsConfig
from components.metrics.render import RULES_PATH, node_exporter_args, prometheus_args

FILES = Path(__file__).parent / "files"
# The exporter runs beside copies of these (standard library only), as the status command reads them.
SLURM_TEXT = Path(__file__).resolve().parents[1] / "slurm" / "slurm_text.py"
COST_ARITHMETIC = Path(__file__).parent / "cost_arithmetic.py"
EXPORTER_SOURCES = {
    "EXPORTER_SOURCE": FILES / "slurm_exporter.py",
    "SLURM_TEXT_SOURCE": SLURM_TEXT,
    "COST_SOURCE": COST_ARITHMETIC,
}


@dataclass(frozen=True)
class MetricsSetup:
    """What the metrics are built from (rendered by components/metrics/render.py)."""

    metrics: MetricsConfig
    prometheus_config: str
    alert_rules: str
    exporter_settings: str
    exporter_address: str
    exporter_guard: str


@dataclass(frozen=True)
class ScrapedNode:
    """A node whose node exporter is set up: its container and the transport of its host."""

    name: str
    container: CudaContainer
    container_name: str
    nat_address: str
    transport: Transport | None


class Metrics(pulumi.ComponentResource):
    """Prometheus, the cluster's exporter and the node exporters.

    Builds:
      - `<name>-exporter`: on the controller's host, the Slurm and GPU exporter
        (files/slurm_exporter.py) as a daemon run as root (with no new privileges: its Slurm
        commands are the host's client wrappers, which lxc-attach to the cluster's container),
        on the host's NAT bridge address, which a firewall guard keeps for Prometheus's
        container (and the host) only.
      - `<name>-container`: a clone of the node image on the NAT bridge at `metrics.nat_address`.
      - `<name>-prometheus`: Debian's prometheus installed in it, its scrape config, alert rules,
        listen address and retention; create waits for /-/ready. Its data lives in the
        container: destroy keeps none of it.
      - `<name>-<node>-node-exporter`: Debian's prometheus-node-exporter (in the node image,
        disabled there) enabled in each node on its NAT address, with a few collectors.
    """

    url: pulumi.Output[str]
    container: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        cluster: ClusterIdentity,
        setup: MetricsSetup,
        platform: ContainerPlatform,
        image: pulumi.Resource,
        nodes: list[ScrapedNode],
        opts: pulumi.ResourceOptions | None = None,
        transport: Transport | None = None,
    ):
        super().__init__("gpu-cluster:metrics:Metrics", name, None, opts)
        metrics = setup.metrics
        self.exporter = host_command(
            f"{name}-exporter",
            transport=transport,
            create=FILES / "exporter_create.sh",
            delete=FILES / "exporter_delete.sh",
            environment={
                "CLUSTER": cluster.name,
                "CLUSTER_DIR": cluster.cluster_dir,
                "EXPORTER_SETTINGS": setup.exporter_settings,
                "EXPORTER_ADDRESS": setup.exporter_address,
                "EXPORTER_PORT": str(metrics.exporter_port),
                "EXPORTER_GUARD": setup.exporter_guard,
                **{key: path.read_text() for key, path in EXPORTER_SOURCES.items()},
            },
            placed=True,
            opts=child_options(self, opts),
        )
        self.container_resource = CudaContainer(
            f"{name}-container",
            cluster,
            ContainerSpec(hostname=metrics.name, nat_address=metrics.nat_address, cluster_address=None, gpu_devices=[]),
            platform,
            image=image,
            opts=child_options(self, opts),
            transport=transport,
        )
        self.prometheus = host_command(
            f"{name}-prometheus",
            transport=transport,
            create=FILES / "prometheus_create.sh",
            delete=FILES / "prometheus_delete.sh",
            environment={
                "CONTAINER": cluster.container_name(metrics.name),
                "PROMETHEUS_CONFIG": setup.prometheus_config,
                "ALERT_RULES": setup.alert_rules,
                "RULES_PATH": RULES_PATH,
                "PROMETHEUS_ARGS": prometheus_args(metrics),
                "PROMETHEUS_URL": f"http://{metrics.nat_address}:{metrics.port}",
            },
            opts=child_options(self, opts, self.container_resource, replace_with=[self.container_resource.lxc]),
        )
        self.node_exporters = [
            host_command(
                f"{name}-{node.name}-node-exporter",
                transport=node.transport,
                create=FILES / "node_exporter_create.sh",
                delete=FILES / "node_exporter_delete.sh",
                environment={
                    "CONTAINER": node.container_name,
                    "NODE_EXPORTER_ARGS": node_exporter_args(metrics, node.nat_address),
                    "NODE_EXPORTER_ADDRESS": node.nat_address,
                    "NODE_EXPORTER_PORT": str(metrics.node_exporter_port),
                },
                opts=child_options(self, opts, node.container, replace_with=[node.container.lxc]),
            )
            for node in nodes
        ]
        self.url = pulumi.Output.from_input(f"http://{metrics.nat_address}:{metrics.port}/")
        self.container = self.container_resource.container
        self.register_outputs({"url": self.url, "container": self.container})
