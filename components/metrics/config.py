"""Typed config of the cluster's metrics: Prometheus in a container of its own, its exporters
and alert rules."""

from typing import Annotated

from pydantic import Field, Strict

from components.config_types import Address, Hostname, StrictBool, StrictInt, StrictModel

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
