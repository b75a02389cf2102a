"""The typed `gpu-cluster:cluster` config: stack files, derived views, and every rule's message."""

import copy
import subprocess

import pulumi
import pytest

from components.config import CLUSTER_RULES, ClusterConfig
from components.slurm.config import slurm_hostlist
from components.stack_config import ConfigError, parse_stack_config
from tests.harness.program_harness import run_program, stack_config


def local_cluster() -> dict:
    return copy.deepcopy(stack_config("local")["cluster"])


def error_of(cluster: dict) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_stack_config({"cluster": cluster})
    return str(caught.value)


def error_after(change) -> str:
    """The config error of the local stack with `change` applied to its cluster section."""
    cluster = local_cluster()
    change(cluster)
    return error_of(cluster)


@pytest.mark.parametrize("stack", ["local", "e2e"])
def test_stack_files_validate(stack):
    config = parse_stack_config(stack_config(stack)).cluster
    assert config.hostlist == "c[000-003]"
    assert config.controller_node.name == "c000"


def test_gpus_are_assigned_one_per_node_unless_shared():
    e2e = parse_stack_config(stack_config("e2e")).cluster
    assert e2e.gpu_assignment() == {f"c00{i}": [f"/run/gpucluster-e2e-dev/nvidia{i}"] for i in range(4)}
    local = parse_stack_config(stack_config("local")).cluster
    assert set(map(tuple, local.gpu_assignment().values())) == {("/dev/nvidia0",)}


def test_stand_in_gpus_are_the_devices_in_the_clusters_private_directory():
    config = parse_stack_config(stack_config("nogpu")).cluster
    assert config.device_dir == "/run/gpucluster-nogpu-dev"
    assert config.gpu.devices == [f"/run/gpucluster-nogpu-dev/nvidia{i}" for i in range(4)]
    assert config.gpu.control_devices == ["/run/gpucluster-nogpu-dev/nvidiactl"]
    assert config.gpu_assignment()["c003"] == ["/run/gpucluster-nogpu-dev/nvidia3"]
    # Dumped and read back (the devices now given explicitly, and equal to the stand-ins): the same.
    assert ClusterConfig.model_validate(config.model_dump(mode="json")) == config


@pytest.mark.parametrize(
    ("stand_in", "message"),
    [
        ({"count": "4"}, "cluster.gpu.stand_in.count: Input should be a valid integer"),
        ({"count": 4.0}, "cluster.gpu.stand_in.count: Input should be a valid integer"),
        ({"count": True}, "cluster.gpu.stand_in.count: Input should be a valid integer"),
        ({"count": 0}, "cluster.gpu.stand_in.count: Input should be greater than or equal to 1"),
        ({"count": 65}, "cluster.gpu.stand_in.count: Input should be less than or equal to 64"),
        ({}, "cluster.gpu.stand_in.count: Field required"),
        ({"count": 4, "major": 195}, "cluster.gpu.stand_in.major: Extra inputs are not permitted"),
    ],
)
def test_stand_in_count_is_a_plain_integer(stand_in, message):
    assert message in error_after(_set("gpu", {"stand_in": stand_in}))


def test_the_web_app_has_its_own_gpu_or_shares_one_explicitly():
    e2e = parse_stack_config(stack_config("e2e")).cluster
    assert e2e.web_app.gpus == ["/run/gpucluster-e2e-dev/nvidia4"] and not e2e.web_app.share_gpus
    assert not any("/run/gpucluster-e2e-dev/nvidia4" in gpus for gpus in e2e.gpu_assignment().values())
    local = parse_stack_config(stack_config("local")).cluster
    assert local.web_app.gpus == ["/dev/nvidia0"] and local.web_app.share_gpus
    # Not said: no GPU at all (never a node's by default).
    cluster = local_cluster()
    del cluster["web_app"]["gpus"], cluster["web_app"]["share_gpus"]
    assert ClusterConfig.model_validate(cluster).web_app.gpus == []


def test_forward_sources_are_networks():
    cluster = local_cluster()
    cluster["forwards"] = [{"host_port": 2200, "target": "c000", "port": 22, "allowed_sources": ["10.0.0.0/8"]}]
    cluster["web_app"]["allowed_sources"] = ["192.168.1.0/24", "10.1.0.0/16"]
    config = ClusterConfig.model_validate(cluster)
    assert [f.source_list for f in config.all_forwards] == ["192.168.1.0/24+10.1.0.0/16", "10.0.0.0/8"]
    cluster["forwards"][0]["allowed_sources"] = ["10.0.0.1/8"]
    assert "cluster.forwards[0].allowed_sources[0]: Input is not a valid IPv4 network" in error_of(cluster)
    cluster["forwards"][0]["allowed_sources"] = ["any"]
    assert "cluster.forwards[0].allowed_sources[0]: Input is not a valid IPv4 network" in error_of(cluster)


def test_hostlist_groups_mixed_names():
    cluster = local_cluster()
    cluster["nodes"].append({"name": "gpu7", "nat_address": "10.42.3.30", "cluster_address": "10.42.5.30"})
    cluster["gpu"]["share_between_nodes"] = True
    assert ClusterConfig.model_validate(cluster).hostlist == "c[000-003],gpu7"


def test_nothing_to_build_is_an_error():
    with pytest.raises(ConfigError, match="nothing to build"):
        parse_stack_config({})


# ---- one case per cross-field rule: (rule, change to the local stack, expected message) ----


def _set(path: str, value):
    def change(cluster: dict) -> None:
        *parents, last = path.split(".")
        target = cluster
        for part in parents:
            target = target[int(part)] if part.isdigit() else target[part]
        target[int(last) if last.isdigit() else last] = value

    return change


def _all(*changes):
    def change(cluster: dict) -> None:
        for one in changes:
            one(cluster)

    return change


PEOPLE = [{"name": "alice", "uid": 2001, "gid": 2001}, {"name": "bob", "uid": 2002, "gid": 2002}]


def _accounting(**fields):
    """People and an accounting section (one account, physics, for alice), with `fields` set."""
    section = {"nat_address": "10.42.3.20", "accounts": [{"name": "physics", "gpus": 1, "users": ["alice"]}]}
    return _all(_set("users", PEOPLE), _set("accounting", {**section, **fields}))


RULE_CASES = [
    (
        "rule_aws",
        lambda c: c.update(aws=copy.deepcopy(stack_config("ec2")["cluster"]["aws"])),
        "cluster.aws: EC2 hosts are listed under hosts (hosts[].connection.kind: ec2); this stack has no hosts",
    ),
    (
        "rule_names_slurm_and_lxc_can_use",
        _set("nodes.1.name", "default"),
        "cluster.nodes[1].name: 'default' is a word Slurm reserves (all, default, localhost)",
    ),
    (
        "rule_names_slurm_and_lxc_can_use",
        _set("nodes.2.name", "all"),
        "cluster.nodes[2].name: 'all' is a word Slurm reserves",
    ),
    (
        "rule_names_slurm_and_lxc_can_use",
        _set("nodes.0.name", "localhost"),
        "cluster.nodes[0].name: 'localhost' is a word Slurm reserves",
    ),
    (
        "rule_names_slurm_and_lxc_can_use",
        _set("slurm.partitions.0.name", "default"),
        "cluster.slurm.partitions[0].name: 'default' is a word Slurm reserves",
    ),
    (
        "rule_names_slurm_and_lxc_can_use",
        _set("web_app.name", "image"),
        "cluster.web_app.name: 'image' would be the container gpu-image, which the program uses itself",
    ),
    (
        "rule_names_slurm_and_lxc_can_use",
        _set("nodes.3.name", "image"),
        "cluster.nodes[3].name: 'image' would be the container gpu-image",
    ),
    (
        "rule_forward_ports",
        _set("forwards", [{"host_port": 22, "target": "c000", "port": 22}]),
        "cluster.forwards[0].host_port: 22 is a well-known port of the host; forward a port from 1024 up",
    ),
    (
        "rule_forward_ports",
        _set("web_app.host_port", 6817),
        "cluster.web_app.host_port: 6817 is Slurm's own port (6817, 6818, 6819)",
    ),
    (
        "rule_forward_ports",
        _set("web_app.host_port", 53),
        "cluster.web_app.host_port: 53 is a well-known port of the host",
    ),
    (
        "rule_host_paths",
        _set("host.shared_dir", "/"),
        "cluster.host.shared_dir: / is a system directory",
    ),
    (
        "rule_host_paths",
        _set("host.shared_dir", "/etc/gpu"),
        "cluster.host.shared_dir: /etc/gpu is inside /etc, which the cluster must not use",
    ),
    (
        "rule_host_paths",
        _set("host.shared_dir", "/var/lib/gpucluster/gpu/shared"),
        "cluster.host.shared_dir: /var/lib/gpucluster/gpu/shared overlaps host.state_dir /var/lib/gpucluster",
    ),
    (
        "rule_host_paths",
        _set("host.shared_dir", "/var/lib"),
        "cluster.host.shared_dir: /var/lib is a system directory",
    ),
    (
        "rule_host_paths",
        _set("host.shared_dir", "/var/lib/lxc/shared"),
        "cluster.host.shared_dir: /var/lib/lxc/shared is inside /var/lib/lxc",
    ),
    (
        "rule_host_paths",
        _set("host.state_dir", "/var/lib"),
        "cluster.host.state_dir: /var/lib is a system directory",
    ),
    (
        "rule_host_paths",
        _set("host.state_dir", "/tmp/gpucluster"),
        "cluster.host.state_dir: /tmp/gpucluster is inside /tmp",
    ),
    (
        "rule_host_paths",
        _set("host.state_dir", "/dev/shm/gpucluster"),
        "cluster.host.state_dir: /dev/shm/gpucluster is inside /dev",
    ),
    (
        "rule_host_paths",
        _set("gpu.cuda_path", "/usr"),
        "cluster.gpu.cuda_path: /usr is a system directory",
    ),
    (
        "rule_host_paths",
        _set("gpu.cuda_path", "/var/lib/gpucluster"),
        "cluster.gpu.cuda_path: /var/lib/gpucluster overlaps host.state_dir",
    ),
    (
        "rule_driver_files",
        _set("gpu.driver_files", ["/etc/*"]),
        "cluster.gpu.driver_files[0]: /etc/* must name files in a directory below /",
    ),
    (
        "rule_driver_files",
        _set("gpu.driver_files", ["/etc/shadow*"]),
        "cluster.gpu.driver_files[0]: /etc/shadow* is inside /etc, whose files never go into a container",
    ),
    (
        "rule_driver_files",
        _set("gpu.driver_files", ["/usr/lib/*/libcuda.so*"]),
        "cluster.gpu.driver_files[0]: /usr/lib/*/libcuda.so* may only use glob characters in its last part",
    ),
    (
        "rule_driver_files",
        _set("gpu.driver_files", ["/libcuda*"]),
        "cluster.gpu.driver_files[0]: /libcuda* must name files in a directory below /",
    ),
    (
        "rule_driver_files",
        _set("gpu.driver_files", ["/var/lib/gpucluster/gpu/munge*"]),
        "cluster.gpu.driver_files[0]: /var/lib/gpucluster/gpu/munge* is inside /var/lib,",
    ),
    (
        "rule_device_paths",
        _set("gpu.devices", ["/srv/nvidia0"]),
        "cluster.gpu.devices[0]: /srv/nvidia0 must be a device node under /dev or the cluster's private device "
        "directory /run/gpucluster-gpu-dev",
    ),
    (
        "rule_device_paths",
        _set("gpu.control_devices", ["/dev/sda"]),
        "cluster.gpu.control_devices[0]: /dev/sda is not an NVIDIA device node",
    ),
    (
        "rule_device_paths",
        _set("gpu.devices", ["/dev"]),
        "cluster.gpu.devices[0]: /dev must be a device node under /dev",
    ),
    (
        "rule_unique_node_names",
        _set("nodes.1.name", "c000"),
        "cluster.nodes[].name: 'c000' is used more than once",
    ),
    (
        "rule_unique_node_names",
        _set("web_app.name", "c001"),
        "cluster.nodes[].name: 'c001' is used more than once (node, web_app and accounting names must be unique)",
    ),
    (
        "rule_bridges_distinct",
        _set("network.cluster_bridge.name", "gpubr0"),
        "cluster.network.cluster_bridge.name: 'gpubr0' is also the nat_bridge name",
    ),
    (
        "rule_bridges_distinct",
        _set("network.cluster_bridge.subnet", "10.42.0.0/16"),
        "cluster.network.cluster_bridge.subnet: 10.42.0.0/16 overlaps the nat_bridge subnet 10.42.3.0/24",
    ),
    (
        "rule_bridges_distinct",
        _set("network.nat_bridge.address", "10.42.3.0/24"),
        "cluster.network.nat_bridge.address: 10.42.3.0/24 is the network or broadcast address",
    ),
    (
        "rule_nat_addresses_in_subnet",
        _set("nodes.2.nat_address", "10.42.4.2"),
        "cluster.nodes[2].nat_address: 10.42.4.2 is not a usable address of the NAT bridge subnet 10.42.3.0/24",
    ),
    (
        "rule_nat_addresses_in_subnet",
        _set("nodes.0.nat_address", "10.42.3.1"),
        "cluster.nodes[0].nat_address: 10.42.3.1 is the NAT bridge's own address (gateway)",
    ),
    (
        "rule_nat_addresses_in_subnet",
        _set("web_app.nat_address", "10.42.3.255"),
        "cluster.web_app.nat_address: 10.42.3.255 is not a usable address",
    ),
    (
        "rule_cluster_addresses_in_subnet",
        _set("nodes.3.cluster_address", "10.42.5.0"),
        "cluster.nodes[3].cluster_address: 10.42.5.0 is not a usable address of the cluster bridge subnet",
    ),
    (
        "rule_unique_addresses",
        _set("nodes.1.nat_address", "10.42.3.2"),
        "cluster.nodes[].nat_address: 10.42.3.2 is assigned more than once",
    ),
    (
        "rule_unique_addresses",
        _set("web_app.nat_address", "10.42.3.5"),
        "cluster.nodes[].nat_address: 10.42.3.5 is assigned more than once (nodes, web_app and accounting)",
    ),
    (
        "rule_unique_addresses",
        _set("nodes.1.cluster_address", "10.42.5.1"),
        "cluster.nodes[].cluster_address: 10.42.5.1 is assigned more than once",
    ),
    (
        "rule_gpu_devices",
        _set("gpu.devices", ["/dev/nvidia0", "/dev/nvidia0"]),
        "cluster.gpu.devices: /dev/nvidia0 is listed more than once",
    ),
    (
        "rule_gpu_devices",
        _set("gpu.devices", ["/dev/nvidia0", "/opt/gpus/nvidia0"]),
        "cluster.gpu.devices: two devices would both appear as /dev/nvidia0 in the containers",
    ),
    (
        "rule_gpus_match_devices",
        _set("gpu.share_between_nodes", False),
        "cluster.nodes[].gpus: the nodes ask for 4 GPUs in all but gpu.devices declares 1; add devices, "
        "lower nodes[].gpus, or set gpu.share_between_nodes: true",
    ),
    (
        "rule_gpus_match_devices",
        _set("nodes.1.gpus", 2),
        "cluster.nodes[1].gpus: 2 GPUs but gpu.devices declares only 1",
    ),
    (
        "rule_gpus_match_devices",
        _set("gpu", {"stand_in": {"count": 2}}),
        "cluster.nodes[].gpus: the nodes ask for 4 GPUs in all but gpu.stand_in.count declares 2; "
        "raise gpu.stand_in.count, lower nodes[].gpus",
    ),
    (
        "rule_stand_in_gpus",
        _set("gpu", {"stand_in": {"count": 1}, "devices": ["/dev/nvidia0"], "share_between_nodes": True}),
        "cluster.gpu.devices: cannot be set together with gpu.stand_in, whose stand-ins are the devices "
        "(/run/gpucluster-gpu-dev/nvidia0); remove gpu.devices, or remove gpu.stand_in to use real GPUs",
    ),
    (
        "rule_stand_in_gpus",
        _set("gpu", {"stand_in": {"count": 4}, "control_devices": ["/dev/nvidiactl"]}),
        "cluster.gpu.control_devices: cannot be set together with gpu.stand_in, whose stand-ins are the "
        "devices (/run/gpucluster-gpu-dev/nvidiactl); remove gpu.control_devices",
    ),
    (
        "rule_web_app_gpus",
        _set("web_app.gpus", ["/dev/nvidia7"]),
        "cluster.web_app.gpus[0]: /dev/nvidia7 is not one of gpu.devices",
    ),
    (
        "rule_web_app_gpus",
        _set("web_app.gpus", []),
        "cluster.web_app.share_gpus: true but web_app.gpus lists no device to share",
    ),
    (
        # Its own GPU (not shared) is taken out of the nodes' pool: none is left for them.
        "rule_gpus_match_devices",
        _set("web_app.share_gpus", False),
        "cluster.nodes[0].gpus: 1 GPUs but gpu.devices declares only 0 besides the web app's 1",
    ),
    (
        "rule_controller_node",
        _set("slurm.controller.node", "c009"),
        "cluster.slurm.controller.node: 'c009' is not one of nodes[].name",
    ),
    (
        "rule_controller_node",
        _set("slurm.controller", {"placement": "host", "node": "c000"}),
        "cluster.slurm.controller.node: only valid with placement 'container'",
    ),
    (
        "rule_partitions",
        _set("slurm.partitions", [{"name": "a", "default": True}, {"name": "a"}]),
        "cluster.slurm.partitions[].name: 'a' is used more than once",
    ),
    (
        "rule_partitions",
        _set("slurm.partitions", [{"name": "a"}, {"name": "b"}]),
        "cluster.slurm.partitions[].default: exactly one partition must be default, got []",
    ),
    (
        "rule_partitions",
        _set("slurm.partitions", [{"name": "a", "default": True, "nodes": ["c000", "x1"]}]),
        "cluster.slurm.partitions[0].nodes: 'x1' is not one of nodes[].name",
    ),
    (
        "rule_forwards",
        _set("forwards", [{"host_port": 7000, "target": "c000", "port": 22}]),
        "cluster.forwards[].host_port: host port 7000 is forwarded more than once",
    ),
    (
        "rule_forwards",
        _set("forwards", [{"host_port": 2200, "target": "c042", "port": 22}]),
        "cluster.forwards[0].target: 'c042' is not a node or the web app",
    ),
    (
        "rule_unique_node_names",
        _accounting(name="c002"),
        "cluster.nodes[].name: 'c002' is used more than once (node, web_app and accounting names must be unique)",
    ),
    (
        "rule_nat_addresses_in_subnet",
        _accounting(nat_address="10.42.4.20"),
        "cluster.accounting.nat_address: 10.42.4.20 is not a usable address of the NAT bridge subnet",
    ),
    (
        "rule_unique_addresses",
        _accounting(nat_address="10.42.3.3"),
        "cluster.nodes[].nat_address: 10.42.3.3 is assigned more than once (nodes, web_app and accounting)",
    ),
    (
        "rule_users",
        _set("users", [*PEOPLE, {"name": "alice", "uid": 2003, "gid": 2003}]),
        "cluster.users[].name: 'alice' is listed more than once",
    ),
    (
        "rule_users",
        _set("users", [*PEOPLE, {"name": "carol", "uid": 2001, "gid": 2003}]),
        "cluster.users[].uid: 2001 is given to more than one user",
    ),
    (
        "rule_users",
        _set("users", [*PEOPLE, {"name": "carol", "uid": 2003, "gid": 2001}]),
        "cluster.users[].gid: 2001 is the group of ['alice', 'carol']; one gid, one group name",
    ),
    (
        "rule_users",
        _set("users", [*PEOPLE, {"name": "carol", "uid": 2003, "gid": 2003, "group": "alice"}]),
        "cluster.users[].group: 'alice' is given more than one gid",
    ),
    (
        "rule_accounting",
        _accounting(accounts=[{"name": "physics", "users": ["alice", "dave"]}]),
        "cluster.accounting.accounts[0].users: 'dave' is not one of users[].name",
    ),
    (
        "rule_accounting",
        _accounting(accounts=[{"name": "physics"}, {"name": "physics"}]),
        "cluster.accounting.accounts[].name: 'physics' is listed more than once",
    ),
    (
        "rule_accounting",
        _accounting(accounts=[{"name": "root"}]),
        "cluster.accounting.accounts[0].name: 'root' is Slurm's own account",
    ),
    (
        "rule_accounting",
        _accounting(accounts=[{"name": "physics", "qos": ["long"]}]),
        "cluster.accounting.accounts[0].qos: 'long' is not one of accounting.qos[].name (or 'normal')",
    ),
    (
        "rule_accounting",
        _accounting(qos=[{"name": "short"}], accounts=[{"name": "physics", "qos": ["short"], "default_qos": "normal"}]),
        "cluster.accounting.accounts[0].default_qos: 'normal' is not one of the account's qos",
    ),
    (
        "rule_accounting",
        _accounting(qos=[{"name": "short"}, {"name": "short"}]),
        "cluster.accounting.qos[].name: 'short' is listed more than once",
    ),
    (
        "rule_accounting",
        _accounting(qos=[{"name": "normal"}]),
        "cluster.accounting.qos[].name: 'normal' is Slurm's own QOS",
    ),
]


@pytest.mark.parametrize(("rule", "change", "message"), RULE_CASES, ids=[c[0] for c in RULE_CASES])
def test_cross_field_rule_message(rule, change, message):
    assert message in error_after(change)


def test_every_rule_has_a_case():
    assert {rule.__name__ for rule in CLUSTER_RULES} == {case[0] for case in RULE_CASES}


def test_all_problems_are_reported_together():
    cluster = local_cluster()
    cluster["nodes"][1]["name"] = "c000"
    cluster["nodes"][2]["nat_address"] = "10.9.9.9"
    message = error_of(cluster)
    assert "'c000' is used more than once" in message
    assert "nodes[2].nat_address: 10.9.9.9" in message


# ---- field rules: types, ranges and patterns, named with their full path ----

FIELD_CASES = [
    ("string as integer", _set("nodes.0.gpus", "2"), "cluster.nodes[0].gpus: Input should be a valid integer"),
    ("float as integer", _set("nodes.0.cpus", 2.0), "cluster.nodes[0].cpus: Input should be a valid integer"),
    ("bool as integer", _set("web_app.port", True), "cluster.web_app.port: Input should be a valid integer"),
    ("string as port", _set("web_app.host_port", "7000"), "cluster.web_app.host_port: Input should be a valid integer"),
    (
        "string as bool",
        _set("gpu.share_between_nodes", "yes"),
        "cluster.gpu.share_between_nodes: Input should be a valid boolean",
    ),
    (
        "int as bool",
        _set("slurm.partitions.0.default", 1),
        "cluster.slurm.partitions[0].default: Input should be a valid boolean",
    ),
    ("zero cpus", _set("nodes.0.cpus", 0), "cluster.nodes[0].cpus: Input should be greater than or equal to 1"),
    (
        "non-ASCII digits in a time",
        _set("slurm.partitions.0.max_time", "\u0661\u0662:00"),
        "cluster.slurm.partitions[0].max_time: String should match pattern",
    ),
    (
        "time past Slurm's int",
        _set("slurm.partitions.0.max_time", "30000-00:00:00"),
        "cluster.slurm.partitions[0].max_time: '30000-00:00:00' is longer than Slurm can count",
    ),
    (
        "dot in a path",
        _set("host.shared_dir", "/srv/./x"),
        "cluster.host.shared_dir: '/srv/./x' must be a normalised path",
    ),
    ("unknown key", _set("nodes.0.gpu", 1), "cluster.nodes[0].gpu: Extra inputs are not permitted"),
    ("unknown top key", _set("webapp", {}), "cluster.webapp: Extra inputs are not permitted"),
    ("hostname", _set("nodes.0.name", "C000"), "cluster.nodes[0].name: String should match pattern"),
    (
        "hostname injection",
        _set("nodes.0.name", "c0; rm -rf /"),
        "cluster.nodes[0].name: String should match",
    ),
    ("cluster name", _set("name", "gpu-cluster-with-long-name"), "cluster.name: String should match pattern"),
    (
        "interface name",
        _set("network.nat_bridge.name", "averyveryverylongbridge"),
        "cluster.network.nat_bridge.name: String should match pattern",
    ),
    (
        "address",
        _set("nodes.0.nat_address", "10.42.3.300"),
        "cluster.nodes[0].nat_address: Input is not a valid IPv4",
    ),
    ("cidr", _set("network.cluster_bridge.subnet", "10.42.5.1/24"), "cluster.network.cluster_bridge.subnet:"),
    (
        "relative path",
        _set("host.shared_dir", "srv/shared"),
        "cluster.host.shared_dir: 'srv/shared' must be an absolute path",
    ),
    (
        "path with newline",
        _set("host.shared_dir", "/srv/x\nlxc.mount.auto = proc:rw"),
        "cluster.host.shared_dir: String should match pattern",
    ),
    ("path traversal", _set("gpu.devices", ["/dev/../etc/shadow"]), "must be a normalised path"),
    (
        "port range",
        _set("web_app.host_port", 70000),
        "cluster.web_app.host_port: Input should be less than or equal to 65535",
    ),
    (
        "port zero",
        _set("web_app.port", 0),
        "cluster.web_app.port: Input should be greater than or equal to 1",
    ),
    (
        "negative gpus",
        _set("nodes.0.gpus", -1),
        "cluster.nodes[0].gpus: Input should be greater than or equal to 0",
    ),
    ("fractional gpus", _set("nodes.0.gpus", 0.5), "cluster.nodes[0].gpus: Input should be a valid integer"),
    (
        "placement",
        _set("slurm.controller.placement", "cloud"),
        "cluster.slurm.controller.placement: Input should be 'container' or 'host'",
    ),
    (
        "max time",
        _set("slurm.partitions.0.max_time", "forever"),
        "cluster.slurm.partitions[0].max_time: String should match",
    ),
    ("no nodes", _set("nodes", []), "cluster.nodes: List should have at least 1 item"),
    (
        "connections not above job slots",
        _set("web_app.max_connections", 2),
        "cluster.web_app: max_connections (2) must be greater than max_concurrent_jobs (2)",
    ),
    (
        "run cidr with host bits",
        _set("web_app.run_allowed_cidrs", ["10.0.0.1/8"]),
        "cluster.web_app.run_allowed_cidrs[0]: Input is not a valid IPv4 network",
    ),
    (
        "package name",
        _set("image", {"extra_packages": ["vim; curl evil"]}),
        "cluster.image.extra_packages[0]: String should match",
    ),
    (
        "accounting typo",
        _accounting(acounts=[]),
        "cluster.accounting.acounts: Extra inputs are not permitted",
    ),
    (
        "account typo",
        _accounting(accounts=[{"name": "physics", "gpu": 1}]),
        "cluster.accounting.accounts[0].gpu: Extra inputs are not permitted",
    ),
    (
        "qos typo",
        _accounting(qos=[{"name": "short", "max_gpus": 1}]),
        "cluster.accounting.qos[0].max_gpus: Extra inputs are not permitted",
    ),
    (
        "account name",
        _accounting(accounts=[{"name": "Physics"}]),
        "cluster.accounting.accounts[0].name: String should match pattern",
    ),
    (
        "negative gpu limit",
        _accounting(accounts=[{"name": "physics", "gpus": -1}]),
        "cluster.accounting.accounts[0].gpus: Input should be greater than or equal to 0",
    ),
    (
        "system uid",
        _set("users", [{"name": "alice", "uid": 0, "gid": 2001}]),
        "cluster.users[0].uid: Input should be greater than or equal to 1000",
    ),
    (
        "user name",
        _set("users", [{"name": "alice smith", "uid": 2001, "gid": 2001}]),
        "cluster.users[0].name: String should match pattern",
    ),
    (
        "user typo",
        _set("users", [{"name": "alice", "uid": 2001, "gid": 2001, "shell": "/bin/sh"}]),
        "cluster.users[0].shell: Extra inputs are not permitted",
    ),
    (
        "health check interval",
        _set("slurm.health_check", {"interval_s": 1}),
        "cluster.slurm.health_check.interval_s: Input should be greater than or equal to 5",
    ),
]


@pytest.mark.parametrize(("case", "change", "message"), FIELD_CASES, ids=[c[0] for c in FIELD_CASES])
def test_field_rule_message(case, change, message):
    assert message in error_after(change)


def test_invalid_config_fails_before_any_resource_is_registered():
    cluster = local_cluster()
    cluster["nodes"][1]["nat_address"] = "10.42.3.2"
    with pytest.raises(ConfigError, match=r"10\.42\.3\.2 is assigned more than once"):
        run_program({"cluster": cluster}, stack="bad")


def test_a_config_error_is_pulumis_clean_error():
    # pulumi prints a RunError's message alone, without a Python traceback.
    with pytest.raises(pulumi.RunError):
        parse_stack_config({})


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        (["c000", "c001", "c002", "c003", "gpu7"], "c[000-003],gpu7"),
        # Slurm 22.05 cannot parse c[1-2]a: only a trailing number is bracketed.
        (["c1a", "c2a"], "c1a,c2a"),
        (["b1", "b3", "b2", "b5", "a"], "b[1-3,5],a"),
        (["c9", "c10", "c0", "c00"], "c[0,9],c[00,10]"),
        (["h100-0", "h100-1"], "h100-[0-1]"),
    ],
)
def test_slurm_hostlist(names, expected, tmp_path):
    assert slurm_hostlist(names) == expected
    # ...and Slurm 22.05 reads it back as the same names.
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\nSlurmctldHost=h\n")
    done = subprocess.run(
        ["scontrol", "show", "hostnames", expected],
        env={"SLURM_CONF": str(conf), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert sorted(done.stdout.split()) == sorted(names)
