"""Typed config of the cluster's metrics: Prometheus in a container of its own, its exporters
and alert rules."""

from typing import Annotated

from pydantic import Field, Strict

from components.common.config_types import Address, Hostname, StrictBool, StrictInt, StrictModel
from components.network.rules import SLURM_PORTS

# Prometheus and the exporters run as unprivileged users: no port below 1024.
ServicePort = Annotated[int, Strict(), Field(ge=1024, le=65535, description="TCP port, 1024-65535")]


class MetricsConfig(StrictModel):
    """Prometheus (Debian's package) in the container `<cluster>-<name>` on the controller's
    host, scraping every node's node exporter and the cluster's own Slurm and GPU exporter;
    alert rules evaluated by Prometheus itself. Everything listens on cluster addresses only."""

    enabled: StrictBool = Field(True, description="build the metrics; false: the section is kept, nothing is built")
    name: Hostname = Field("metrics", description="the Prometheus container's hostname (container <cluster>-<name>)")
    nat_address: Address = Field(
        description="static address of the Prometheus container on the controller host's NAT bridge; "
        "Prometheus listens there only"
    )
    port: ServicePort = Field(9090, description="Prometheus's port on nat_address")
    exporter_port: ServicePort = Field(
        9481,
        description="port of the Slurm and GPU exporter, on the controller host's NAT bridge address",
    )
    node_exporter_port: ServicePort = Field(9100, description="port of each node's node exporter, on its nat_address")
    scrape_interval_s: StrictInt = Field(30, ge=5, le=3600, description="how often every target is scraped")
    evaluation_interval_s: StrictInt = Field(30, ge=1, le=3600, description="how often the alert rules are evaluated")
    alert_for_s: StrictInt = Field(
        300, ge=0, le=86400, description="how long a rule's condition must hold before its alert fires"
    )
    pending_alert_s: StrictInt = Field(
        3600, ge=10, le=30 * 86400, description="a job pending longer than this fires the JobPendingTooLong alert"
    )
    retention_days: StrictInt = Field(15, ge=1, le=3650, description="samples older than this are deleted")
    retention_size_mb: StrictInt | None = Field(
        None, ge=64, le=10**7, description="and the oldest samples go once the data exceeds this size (none: no limit)"
    )


def rule_metrics_ports(c):
    """The metrics' ports against the cluster's others: Slurm's (slurmd binds 6818 in every
    node, where the node exporter listens too; slurmctld 6817 on the controller's host), the
    forwards' and the web app's host ports (their DNAT takes every local address, the
    exporter's included) and the served NFS port."""
    if not c.metrics_enabled:
        return
    taken = {port: f"Slurm's own port {port} ({', '.join(map(str, sorted(SLURM_PORTS)))})" for port in SLURM_PORTS}
    if c.web_app:
        taken.setdefault(c.web_app.host_port, f"web_app.host_port {c.web_app.host_port}")
    for i, forward in enumerate(c.forwards):
        taken.setdefault(forward.host_port, f"forwards[{i}].host_port {forward.host_port}")
    if c.shared_fs is not None and c.shared_fs.kind == "served":  # the server listens on a cluster host
        taken.setdefault(c.shared_fs.port, f"shared_fs.port {c.shared_fs.port} (the served NFS)")
    for field in ("port", "exporter_port", "node_exporter_port"):
        port = getattr(c.metrics, field)
        if port in taken:
            yield f"metrics.{field}: {port} is also {taken[port]}; pick another port"
