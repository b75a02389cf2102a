"""What the metrics are made of, rendered from the config by pure functions: Prometheus's
scrape config and alert rules, its and the node exporters' arguments, the exporter's settings."""

import json
from typing import Any, Protocol

import yaml

from components.common.config_types import guard_tag
from components.metrics.config import MetricsConfig
from components.metrics.prices import PricedCluster, node_prices

RULES_PATH = "/etc/prometheus/gpucluster-rules.yml"
# The node exporter's collectors: a few cheap ones (a node's CPUs are its jobs').
NODE_COLLECTORS = ("cpu", "loadavg", "meminfo")


class MetricsCluster(PricedCluster, Protocol):
    """What the metrics need of the cluster (the composition's ClusterConfig): its name, nodes
    and their GPUs, the controller's host (where Prometheus and the exporter run), whether
    accounting is on, and the prices of PricedCluster."""

    name: str
    metrics: MetricsConfig | None
    accounting: Any

    @property
    def controller_host(self) -> Any: ...
    def gpu_assignment(self) -> dict[str, list[str]]: ...


def exporter_address(config: MetricsCluster) -> str:
    """The Slurm and GPU exporter listens on the controller host's address on its NAT bridge."""
    return str(config.controller_host.network.nat_bridge.address.ip)


def exporter_guard(config: MetricsCluster) -> str:
    """The exporter's firewall guard (components/files/lib/guards.sh): on the host's NAT-bridge
    address every container reaches, only Prometheus's container (and the host) may ask it;
    a job looping on it would load slurmctld and read every account's spend."""
    metrics = config.metrics
    tag = guard_tag(config.name, "exporter")
    return f"{tag},exporter,{exporter_address(config)},{metrics.exporter_port},{metrics.nat_address}"


def render_prometheus_config(config: MetricsCluster) -> str:
    """prometheus.yml: every node of every host (its node exporter, on the node's NAT address:
    the other hosts' NAT subnets are routed), the exporter, Prometheus itself."""
    metrics = config.metrics
    nodes = [
        {
            "targets": [f"{node.nat_address}:{metrics.node_exporter_port}"],
            "labels": {"node": node.name, "host": config.node_host(node).name},
        }
        for node in config.nodes
    ]
    document = {
        "global": {
            "scrape_interval": f"{metrics.scrape_interval_s}s",
            "scrape_timeout": f"{min(10, metrics.scrape_interval_s)}s",
            "evaluation_interval": f"{metrics.evaluation_interval_s}s",
            "external_labels": {"cluster": config.name},
        },
        "rule_files": [RULES_PATH],
        "scrape_configs": [
            {"job_name": "prometheus", "static_configs": [{"targets": [f"{metrics.nat_address}:{metrics.port}"]}]},
            {
                "job_name": "gpucluster",
                "static_configs": [
                    {
                        "targets": [f"{exporter_address(config)}:{metrics.exporter_port}"],
                        "labels": {"host": config.controller_host.name},
                    }
                ],
            },
            {"job_name": "node", "static_configs": nodes},
        ],
    }
    return "# Managed by the gpu-cluster Pulumi program.\n" + yaml.safe_dump(document, sort_keys=False)


def alert_rules(metrics: MetricsConfig) -> list[dict]:
    """The alert rules, evaluated by Prometheus (its /api/v1/alerts lists the firing ones)."""
    held = f"{metrics.alert_for_s}s"
    return [
        {
            "alert": "NodeDown",
            "expr": 'gpucluster_node_down == 1 or on(node) up{job="node"} == 0',
            "for": held,
            "labels": {"severity": "critical"},
            "annotations": {"summary": "node {{ $labels.node }} is down (Slurm) or its node exporter does not answer"},
        },
        {
            "alert": "NodeDrained",
            "expr": "gpucluster_node_drained == 1",
            "for": held,
            "labels": {"severity": "warning"},
            "annotations": {"summary": "node {{ $labels.node }} is drained: {{ $labels.reason }}"},
        },
        {
            "alert": "GpuHealthCheckFailing",
            "expr": "gpucluster_gpu_health_failing == 1 or gpucluster_gpu_present == 0",
            "for": held,
            "labels": {"severity": "critical"},
            "annotations": {"summary": "a GPU of node {{ $labels.node }} fails its health check or is missing"},
        },
        {
            "alert": "JobPendingTooLong",
            "expr": f"gpucluster_pending_longest_seconds > {metrics.pending_alert_s}",
            "for": held,
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "a job of partition {{ $labels.partition }} waits longer than "
                + f"{metrics.pending_alert_s} s"
            },
        },
        {
            "alert": "SlurmDown",
            "expr": 'gpucluster_slurm_up == 0 or up{job="gpucluster"} == 0',
            "for": held,
            "labels": {"severity": "critical"},
            "annotations": {"summary": "slurmctld or the cluster's exporter does not answer"},
        },
    ]


def render_alert_rules(metrics: MetricsConfig) -> str:
    document = {
        "groups": [
            {"name": "gpucluster", "interval": f"{metrics.evaluation_interval_s}s", "rules": alert_rules(metrics)}
        ]
    }
    return "# Managed by the gpu-cluster Pulumi program.\n" + yaml.safe_dump(document, sort_keys=False)


def prometheus_args(metrics: MetricsConfig) -> str:
    """ARGS of Debian's prometheus unit: its container's address only, the retention."""
    args = [
        f"--web.listen-address={metrics.nat_address}:{metrics.port}",
        f"--storage.tsdb.retention.time={metrics.retention_days}d",
    ]
    if metrics.retention_size_mb:
        args.append(f"--storage.tsdb.retention.size={metrics.retention_size_mb}MB")
    return " ".join(args)


def node_exporter_args(metrics: MetricsConfig, nat_address) -> str:
    """ARGS of Debian's prometheus-node-exporter unit: the node's NAT address, a few collectors."""
    collectors = " ".join(f"--collector.{name}" for name in NODE_COLLECTORS)
    return f"--web.listen-address={nat_address}:{metrics.node_exporter_port} --collector.disable-defaults {collectors}"


def render_exporter_settings(config: MetricsCluster) -> str:
    """The exporter's settings (JSON): where it listens, each node's price, the controller
    host's GPUs (their presence is checked where they are)."""
    metrics = config.metrics
    here = config.controller_host.name
    gpus = config.gpu_assignment()
    settings = {
        "listen_address": exporter_address(config),
        "port": metrics.exporter_port,
        "prices": {node: str(price) for node, price in node_prices(config).items()},
        "gpus": {n.name: gpus[n.name] for n in config.nodes if config.node_host(n).name == here},
        "accounting": config.accounting is not None,
        "sacct_interval_s": max(60, metrics.scrape_interval_s),
    }
    return json.dumps(settings, indent=1, sort_keys=True)
