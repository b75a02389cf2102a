"""The metrics' config section, and what is rendered from it: Prometheus's scrape config (one
Prometheus for every node of every host), the alert rules, the listen addresses and retention;
checked on the program's commands under mocks."""

import copy
import json

import pytest
import yaml

from components.composition.stack_config import ConfigError, parse_stack_config
from tests.harness.command_executor import host_commands
from tests.harness.program_harness import run_program, stack_config

METRICS = {"nat_address": "10.43.3.30"}
SECRETS = {"gpu2SshKey": "-----BEGIN OPENSSH PRIVATE KEY-----\nnot-a-real-key\n-----END OPENSSH PRIVATE KEY-----\n"}


def with_metrics(stack: str, **metrics) -> dict:
    config = copy.deepcopy(stack_config(stack))
    config["cluster"]["metrics"] = metrics
    return config


def commands(config: dict, stack: str) -> dict:
    return {c.name: c for c in host_commands(run_program(config, stack=stack, secrets=SECRETS))}


def error_of(config: dict) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_stack_config(config)
    return str(caught.value)


def test_defaults_and_the_one_host_scrape_config():
    built = commands(with_metrics("e2e", **METRICS), "e2e")
    prometheus = built["e2e-metrics-prometheus"].environment
    document = yaml.safe_load(prometheus["PROMETHEUS_CONFIG"])
    assert document["global"] == {
        "scrape_interval": "30s",
        "scrape_timeout": "10s",
        "evaluation_interval": "30s",
        "external_labels": {"cluster": "e2e"},
    }
    assert document["rule_files"] == ["/etc/prometheus/gpucluster-rules.yml"] == [prometheus["RULES_PATH"]]
    jobs = {job["job_name"]: job["static_configs"] for job in document["scrape_configs"]}
    assert jobs["prometheus"] == [{"targets": ["10.43.3.30:9090"]}]
    # The exporter on the host's NAT bridge address; every node's exporter on its NAT address.
    assert jobs["gpucluster"] == [{"targets": ["10.43.3.1:9481"], "labels": {"host": "local"}}]
    assert jobs["node"] == [
        {"targets": [f"10.43.3.{i + 2}:9100"], "labels": {"node": f"c00{i}", "host": "local"}} for i in range(4)
    ]
    # Listens on its container's address only, keeps 15 days.
    assert prometheus["PROMETHEUS_ARGS"] == "--web.listen-address=10.43.3.30:9090 --storage.tsdb.retention.time=15d"
    assert prometheus["PROMETHEUS_URL"] == "http://10.43.3.30:9090"
    node = built["e2e-metrics-c001-node-exporter"].environment
    assert node["NODE_EXPORTER_ARGS"] == (
        "--web.listen-address=10.43.3.3:9100 --collector.disable-defaults "
        "--collector.cpu --collector.loadavg --collector.meminfo"
    )
    assert node["CONTAINER"] == "e2e-c001"
    settings = json.loads(built["e2e-metrics-exporter"].environment["EXPORTER_SETTINGS"])
    assert settings == {
        "listen_address": "10.43.3.1",
        "port": 9481,
        "prices": {f"c00{i}": "0.0" for i in range(4)},
        "gpus": {f"c00{i}": [f"/run/gpucluster-e2e-dev/nvidia{i}"] for i in range(4)},
        "accounting": False,
        "sacct_interval_s": 60,
    }
    # The container is a clone on the NAT bridge; the web app asks Prometheus for its panel.
    assert "lxc.net.0.ipv4.address = 10.43.3.30/24" in built["e2e-metrics-container-lxc"].environment["LXC_CONFIG"]
    app = json.loads(built["e2e-web-service"].environment["APP_SETTINGS"])
    assert app["prometheus_url"] == "http://10.43.3.30:9090"
    # The boot unit is written after the metrics; the preflight knows their container.
    after = {urn.split("::")[-1] for urn in built["e2e-boot-unit"].dependencies}
    assert {"e2e-metrics-prometheus", "e2e-metrics-exporter", "e2e-metrics-c003-node-exporter"} <= after
    assert "e2e-metrics" in built["e2e-host-preflight"].environment["CONTAINERS"].split("\n")


def test_without_the_section_or_disabled_nothing_is_built():
    for config in (stack_config("e2e"), with_metrics("e2e", **METRICS, enabled=False)):
        built = commands(config, "e2e")
        assert not [name for name in built if "metrics" in name]
        assert "prometheus_url" not in json.loads(built["e2e-web-service"].environment["APP_SETTINGS"])


def test_two_hosts_one_prometheus_scrapes_every_node_of_both():
    config = with_metrics("twohost", nat_address="10.46.3.30", scrape_interval_s=15, retention_days=30)
    built = commands(config, "twohost")
    assert [name for name in built if name.endswith("-prometheus")] == ["duo-metrics-prometheus"]
    assert [name for name in built if name.endswith("-metrics-exporter")] == ["duo-metrics-exporter"]
    prometheus = built["duo-metrics-prometheus"]
    assert prometheus.connection is None  # on gpu1, the controller's host (local)
    document = yaml.safe_load(prometheus.environment["PROMETHEUS_CONFIG"])
    jobs = {job["job_name"]: job["static_configs"] for job in document["scrape_configs"]}
    assert jobs["node"] == [
        {"targets": ["10.46.3.2:9100"], "labels": {"node": "c000", "host": "gpu1"}},
        {"targets": ["10.46.3.3:9100"], "labels": {"node": "c001", "host": "gpu1"}},
        {"targets": ["10.47.3.2:9100"], "labels": {"node": "c002", "host": "gpu2"}},
        {"targets": ["10.47.3.3:9100"], "labels": {"node": "c003", "host": "gpu2"}},
    ]
    assert jobs["gpucluster"] == [{"targets": ["10.46.3.1:9481"], "labels": {"host": "gpu1"}}]
    assert document["global"]["scrape_interval"] == "15s"
    assert "--storage.tsdb.retention.time=30d" in prometheus.environment["PROMETHEUS_ARGS"]
    # Each node's exporter is set up on its own host; gpu2's over SSH.
    assert built["duo-metrics-c000-node-exporter"].connection is None
    assert built["duo-metrics-c002-node-exporter"].connection["host"] == "192.168.10.12"
    # The exporter checks the presence of the GPUs of its own host's nodes only.
    settings = json.loads(built["duo-metrics-exporter"].environment["EXPORTER_SETTINGS"])
    assert sorted(settings["gpus"]) == ["c000", "c001"]
    assert sorted(settings["prices"]) == ["c000", "c001", "c002", "c003"]


def test_alert_rules():
    config = with_metrics("e2e", **METRICS, alert_for_s=0, evaluation_interval_s=2, pending_alert_s=600)
    rules_text = commands(config, "e2e")["e2e-metrics-prometheus"].environment["ALERT_RULES"]
    (group,) = yaml.safe_load(rules_text)["groups"]
    assert group["interval"] == "2s"
    rules = {rule["alert"]: rule for rule in group["rules"]}
    assert sorted(rules) == ["GpuHealthCheckFailing", "JobPendingTooLong", "NodeDown", "NodeDrained", "SlurmDown"]
    assert {rule["for"] for rule in rules.values()} == {"0s"}
    assert rules["NodeDrained"]["expr"] == "gpucluster_node_drained == 1"
    assert "{{ $labels.reason }}" in rules["NodeDrained"]["annotations"]["summary"]
    assert rules["NodeDown"]["expr"] == 'gpucluster_node_down == 1 or on(node) up{job="node"} == 0'
    assert rules["GpuHealthCheckFailing"]["expr"] == "gpucluster_gpu_health_failing == 1 or gpucluster_gpu_present == 0"
    assert rules["JobPendingTooLong"]["expr"] == "gpucluster_pending_longest_seconds > 600"
    assert rules["SlurmDown"]["expr"] == 'gpucluster_slurm_up == 0 or up{job="gpucluster"} == 0'


def test_retention_size_and_accounting_figures():
    config = with_metrics("e2e", **METRICS, retention_days=7, retention_size_mb=512)
    config["cluster"]["host"]["gpu_hour_price"] = 1.25
    built = commands(config, "e2e")
    assert (
        built["e2e-metrics-prometheus"]
        .environment["PROMETHEUS_ARGS"]
        .endswith("--storage.tsdb.retention.time=7d --storage.tsdb.retention.size=512MB")
    )
    assert json.loads(built["e2e-metrics-exporter"].environment["EXPORTER_SETTINGS"])["prices"]["c000"] == "1.25"


@pytest.mark.parametrize(
    ("metrics", "message"),
    [
        ({"nat_address": "10.43.4.30"}, "metrics.nat_address: 10.43.4.30 is not a usable address of the NAT bridge"),
        ({"nat_address": "10.43.3.2"}, "nodes[].nat_address: 10.43.3.2 is assigned more than once"),
        ({"nat_address": "10.43.3.1"}, "metrics.nat_address: 10.43.3.1 is the NAT bridge's own address"),
        ({**METRICS, "name": "c001"}, "metrics.name: 'c001' is also a node, web_app or accounting name"),
        ({**METRICS, "name": "image"}, "metrics.name: 'image' would be the container e2e-image"),
        ({**METRICS, "scrape_interval_s": 1}, "metrics.scrape_interval_s"),
        ({**METRICS, "port": 80}, "metrics.port"),
        ({**METRICS, "retention_days": 0}, "metrics.retention_days"),
        ({**METRICS, "retention_size_mb": 1}, "metrics.retention_size_mb"),
        ({**METRICS, "alert_for_s": "5m"}, "metrics.alert_for_s"),
        ({**METRICS, "enabled": "yes"}, "metrics.enabled"),
        ({**METRICS, "listen": "0.0.0.0"}, "metrics.listen"),
        ({}, "metrics.nat_address"),
    ],
)
def test_bad_metrics_config_names_the_field(metrics, message):
    assert message in error_of(with_metrics("e2e", **metrics))


@pytest.mark.parametrize(
    ("metrics", "message"),
    [
        ({**METRICS, "node_exporter_port": 6818}, "metrics.node_exporter_port: 6818 is also Slurm's own port 6818"),
        ({**METRICS, "exporter_port": 6817}, "metrics.exporter_port: 6817 is also Slurm's own port 6817"),
        ({**METRICS, "port": 6819}, "metrics.port: 6819 is also Slurm's own port 6819"),
        ({**METRICS, "exporter_port": 7000}, "metrics.exporter_port: 7000 is also web_app.host_port 7000"),
    ],
)
def test_metrics_ports_clashing_with_the_clusters_other_ports_are_refused(metrics, message):
    """N8: slurmd binds 6818 in every node; a forward's DNAT takes the exporter's address too."""
    assert message in error_of(with_metrics("e2e", **metrics))


def test_metrics_ports_clashing_with_a_forward_or_the_served_nfs_port_are_refused():
    config = with_metrics("e2e", **METRICS, node_exporter_port=8022)
    config["cluster"]["forwards"] = [{"host_port": 8022, "target": "c001", "port": 22}]
    assert "metrics.node_exporter_port: 8022 is also forwards[0].host_port 8022" in error_of(config)
    config = with_metrics("twohost", nat_address="10.46.3.30", exporter_port=2049)
    config["cluster"]["shared_fs"] = {"kind": "served", "directory": "/srv/gpucluster/duo/export"}
    assert "metrics.exporter_port: 2049 is also shared_fs.port 2049 (the served NFS)" in error_of(config)


def test_only_prometheus_and_the_host_may_reach_the_exporter_on_the_bridge_address():
    # Its guard (components/files/lib/guards.sh; tests/test_firewall_guards.py runs it) is set
    # and removed with the exporter, and brought back by the boot unit, checked by verify.
    built = commands(with_metrics("e2e", **METRICS), "e2e")
    exporter = built["e2e-metrics-exporter"]
    guard = "gpucluster:e2e:guard:exporter,exporter,10.43.3.1,9481,10.43.3.30"
    assert exporter.environment["EXPORTER_GUARD"] == guard
    assert 'guard_up "$EXPORTER_GUARD"' in exporter.create and 'guard_down "$EXPORTER_GUARD"' in exporter.delete
    text = built["e2e-boot-unit"].environment["HOST_STATE_TEXT"]
    assert f"EXPORTER_GUARD={guard}\n" in text
    plain = commands(stack_config("e2e"), "e2e")["e2e-boot-unit"].environment["HOST_STATE_TEXT"]
    assert "GUARD" not in plain


def test_the_boot_unit_and_verify_know_the_metrics_container_and_exporter():
    built = commands(with_metrics("e2e", **METRICS), "e2e")
    text = built["e2e-boot-unit"].environment["HOST_STATE_TEXT"]
    state = dict(line.split("=", 1) for line in text.splitlines()[1:])
    assert state["METRICS_CONTAINER"] == built["e2e-metrics-prometheus"].environment["CONTAINER"] == "e2e-metrics"
    exporter = built["e2e-metrics-exporter"].environment
    assert state["METRICS_EXPORTER"] == f"{exporter['CLUSTER_DIR']}/metrics"
    # Its Slurm commands are the host's client (the node image's), in the cluster directory.
    assert exporter["CLUSTER_DIR"] == state["CLUSTER_DIR"]
    assert "SLURM_CONF" not in exporter
    # Without metrics the host's description is as before.
    plain = commands(stack_config("e2e"), "e2e")["e2e-boot-unit"].environment["HOST_STATE_TEXT"]
    assert "METRICS" not in plain
