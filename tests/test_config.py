"""The typed `gpu-cluster:cluster` config: stack files, derived views, and every rule's message."""

import base64
import copy
import json
import re
import subprocess
import sys
import typing
from collections.abc import Iterator
from ipaddress import IPv4Address, IPv4Interface, IPv4Network

import pulumi
import pytest
from pydantic import BaseModel, Strict

import review.program
from components.common.config_types import written_as_text
from components.composition.config import CLUSTER_RULES, ClusterConfig
from components.composition.stack_config import ConfigError, parse_stack_config
from components.slurm.config import slurm_hostlist
from review.program import ProgramRun
from tests.burst.stack import BURST
from tests.harness.program_harness import ROOT, run_program, stack_config


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


def test_a_gpu_belongs_to_one_node():
    e2e = parse_stack_config(stack_config("e2e")).cluster
    assert e2e.gpu_assignment() == {f"c00{i}": [f"/run/gpucluster-e2e-dev/nvidia{i}"] for i in range(4)}
    # The tutorial's GPU: c000 owns it (in shards), the other nodes have none.
    local = parse_stack_config(stack_config("local")).cluster
    assert local.gpu_assignment() == {"c000": ["/dev/nvidia0"], "c001": [], "c002": [], "c003": []}


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
    cluster["nodes"][-1]["gpus"] = 0
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
    return _all(_set("users", copy.deepcopy(PEOPLE)), _set("accounting", {**section, **fields}))


RULE_CASES = [
    (
        "rule_aws",
        lambda c: c.update(aws=copy.deepcopy(stack_config("ec2")["cluster"]["aws"])),
        "cluster.aws: EC2 hosts are listed under hosts (hosts[].connection.kind: ec2); this stack has no hosts",
    ),
    (
        "rule_burst",
        lambda c: c.update(burst={**copy.deepcopy(BURST), "on_premises_cidrs": ["192.168.0.0/16"]}),
        "cluster.burst.on_premises_cidrs: the controller's address 10.42.3.2 is in none of them",
    ),
    (
        "rule_containers",
        lambda c: c.update(burst=copy.deepcopy(BURST), containers={}),
        "cluster.containers: burst nodes have no Enroot or Pyxis (their AMI), so no job could start there",
    ),
    (
        "rule_registry_name",
        lambda c: c.update(
            containers={"registry": {"name": "c000", "nat_address": "10.42.3.30", "push_password_secret": "p"}}
        ),
        "cluster.containers.registry.name: 'c000' is also a node",
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
        "cluster.nodes[].name: 'c001' is used more than once "
        "(node, web_app, login and accounting names must be unique)",
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
        "cluster.nodes[].nat_address: 10.42.3.5 is assigned more than once (each container needs its own)",
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
        _set("nodes.1.gpus", 1),
        "cluster.nodes[].gpus: the nodes ask for 2 GPUs in all but gpu.devices declares 1; add devices, "
        "or lower nodes[].gpus (several jobs share a GPU as Slurm shards: nodes[].gpu_shards)",
    ),
    (
        "rule_gpus_match_devices",
        _set("gpu.share_between_nodes", True),
        "cluster.gpu.share_between_nodes: true is no longer accepted: nodes each claiming the same GPU let "
        "Slurm start several jobs that each believe they have the whole GPU. Give the GPU to one node",
    ),
    (
        "rule_gpu_shards",
        _set("nodes.1.gpu_shards", 2),
        "cluster.nodes[1].gpu_shards: c001 has no GPU to share (nodes[1].gpus is 0)",
    ),
    (
        "rule_gpus_match_devices",
        _all(_set("gpu", {"stand_in": {"count": 2}}), *(_set(f"nodes.{i}.gpus", 1) for i in (1, 2, 3))),
        "cluster.nodes[].gpus: the nodes ask for 4 GPUs in all but gpu.stand_in.count declares 2; "
        "raise gpu.stand_in.count, or lower nodes[].gpus",
    ),
    (
        "rule_stand_in_gpus",
        _set("gpu", {"stand_in": {"count": 1}, "devices": ["/dev/nvidia0"]}),
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
        "rule_login",
        lambda c: c.update(login={"nat_address": "10.42.3.30"}),
        "cluster.login: no person of users[] has ssh_keys, so nobody could log in",
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
        "cluster.nodes[].gpus: the nodes ask for 1 GPUs in all but gpu.devices declares 0 besides the web app's 1",
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
        "cluster.accounting.name: 'c002' is also a node or web_app name; the database container needs a name",
    ),
    (
        "rule_nat_addresses_in_subnet",
        _accounting(nat_address="10.42.4.20"),
        "cluster.accounting.nat_address: 10.42.4.20 is not a usable address of the NAT bridge subnet",
    ),
    (
        "rule_unique_addresses",
        _accounting(nat_address="10.42.3.3"),
        "cluster.nodes[].nat_address: 10.42.3.3 is assigned more than once (each container needs its own)",
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
    (
        "rule_shared_fs",
        _set("shared_fs", {"kind": "nfs", "server": "nfs.example.org", "path": "/export/local"}),
        "cluster.shared_fs: needs `hosts` or `burst` (a one-host stack's shared_dir is on its only host already",
    ),
    (
        "rule_metrics_ports",
        _set("metrics", {"nat_address": "10.42.3.30", "node_exporter_port": 6818}),
        "cluster.metrics.node_exporter_port: 6818 is also Slurm's own port 6818",
    ),
    (
        "rule_burst_shared_fs",
        lambda c: c.update(burst=copy.deepcopy(BURST), shared_fs={"kind": "efs"}),
        "cluster.burst: shared_fs kind efs is in the EC2 site's VPC",
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


# ---- field errors and cross-field rules in one message ----

UNCHECKED = "are checked once these are fixed: more may follow)"

TOGETHER_CASES = [
    (
        "same address twice, a number for a time",
        _all(_set("nodes.1.nat_address", "10.42.3.2"), _set("slurm.partitions.0.max_time", 0)),
        ["  - cluster.slurm.partitions[0].max_time: Input should be a valid string"],
        ["  - cluster.nodes[].nat_address: 10.42.3.2 is assigned more than once (each container needs its own)"],
    ),
    (
        "subnets overlap, a quoted number in a node",
        _all(_set("network.cluster_bridge.subnet", "10.42.0.0/16"), _set("nodes.2.cpus", "2")),
        ["  - cluster.nodes[2].cpus: Input should be a valid integer"],
        [
            "  - cluster.network.cluster_bridge.subnet: 10.42.0.0/16 overlaps the nat_bridge subnet 10.42.3.0/24;"
            " use disjoint subnets",
        ],
    ),
    (
        "an unknown key beside a rule of the web app's own and one of the cluster's",
        _all(
            _set("web_app.colour", "blue"),
            _set("web_app.max_connections", 2),
            _set("nodes.3.cluster_address", "10.42.5.1"),
        ),
        ["  - cluster.web_app.colour: Extra inputs are not permitted"],
        [
            "  - cluster.web_app: max_connections (2) must be greater than max_concurrent_jobs (2), so a request"
            " beyond the job slots can still be told it is busy",
            "  - cluster.nodes[].cluster_address: 10.42.5.1 is assigned more than once",
        ],
    ),
]


@pytest.mark.parametrize(
    ("case", "change", "field_errors", "rule_errors"), TOGETHER_CASES, ids=[c[0] for c in TOGETHER_CASES]
)
def test_field_errors_and_cross_field_errors_are_reported_in_one_message(case, change, field_errors, rule_errors):
    lines = error_after(change).splitlines()
    assert lines[0] == "invalid stack config (gpu-cluster):"
    assert lines[1:] == field_errors + rule_errors, lines
    # Every rule read valid fields only: nothing is left for a second run.
    assert not any(line.endswith(UNCHECKED) for line in lines)


def test_a_rule_that_reads_an_invalid_field_is_skipped_and_the_message_says_more_may_follow():
    cluster = local_cluster()
    cluster["nodes"][1]["nat_address"] = "10.42.3.300"
    cluster["nodes"][2]["nat_address"] = "10.9.9.9"  # outside the subnet: that rule reads nodes[1] too
    cluster["network"]["cluster_bridge"]["name"] = "gpubr0"  # a rule on valid fields only: reported
    lines = error_of(cluster).splitlines()
    assert lines[1:-1] == [
        "  - cluster.nodes[1].nat_address: Input is not a valid IPv4 address",
        "  - cluster.network.cluster_bridge.name: 'gpubr0' is also the nat_bridge name; use two bridges",
    ], lines
    assert not any("10.9.9.9" in line for line in lines)
    assert lines[-1] == (
        f"  (2 rule(s) across fields, e.g. addresses inside subnets and GPU counts, read a field above and {UNCHECKED}"
    )


def test_a_rule_is_never_fed_a_default_in_place_of_an_invalid_value():
    """nodes[0].gpus: "5" is refused; read as its default (1), the GPU rule would pass or fail
    on a value nobody wrote: it is skipped instead."""
    cluster = local_cluster()
    cluster["gpu"] = {"devices": ["/dev/nvidia0"]}  # not shared: the nodes' GPUs must add up
    cluster["web_app"]["gpus"], cluster["web_app"]["share_gpus"] = [], False
    cluster["nodes"] = cluster["nodes"][:1]
    cluster["nodes"][0]["gpus"] = "5"
    lines = error_of(cluster).splitlines()
    assert lines[1] == "  - cluster.nodes[0].gpus: Input should be a valid integer"
    assert not any("GPUs" in line for line in lines), lines
    assert lines[-1].endswith(UNCHECKED)


def _leaves(value, path=()):
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _leaves(item, (*path, index))
    else:
        yield path


@pytest.mark.parametrize("stack", ["nogpu", "e2e", "twohost", "ec2"])
def test_one_invalid_field_of_a_valid_stack_adds_no_rule_error(stack):
    """Whatever field is broken, and however: the rules read only what is valid, so on a stack
    that is valid otherwise they find nothing (the stand-in GPUs' paths derive from the name,
    the count and the run directory: broken, they are not derived at all)."""
    from pydantic import ValidationError

    from components.composition.stack_config import StackConfig, problems

    base = stack_config(stack)
    for path in _leaves(base):
        for bad in ("junk", None, 12345, "/tmp", "Bad"):
            raw = copy.deepcopy(base)
            _set(".".join(map(str, path)), bad)(raw)
            try:
                StackConfig.model_validate(raw)
            except ValidationError as error:
                details, _ = problems(raw, error)
                assert details[len(error.errors()) :] == [], (path, bad)


def test_a_config_that_is_no_mapping_reports_its_error_alone():
    lines = error_of(["c000"]).splitlines()
    assert lines[1] == "  - cluster: Input should be a valid dictionary or instance of ClusterConfig", lines
    assert lines[-1].endswith(UNCHECKED)


def test_a_multi_host_config_reports_a_host_field_beside_a_node_rule():
    def change(cluster):
        cluster["hosts"][1]["install_packages"] = "yes"
        cluster["nodes"][1]["cluster_address"] = cluster["nodes"][0]["cluster_address"]

    lines = twohost_error_after(change).splitlines()
    assert "  - cluster.hosts[1].install_packages: Input should be a valid boolean" in lines
    assert any(line.startswith("  - cluster.nodes[].cluster_address: ") for line in lines), lines


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


# ---- values Slurm, sshd, the kernel or useradd would break on: refused with the field named ----


def twohost() -> dict:
    return copy.deepcopy(stack_config("twohost")["cluster"])


def twohost_error_after(change) -> str:
    cluster = twohost()
    change(cluster)
    return error_of(cluster)


def _models(model: type[BaseModel], seen: set) -> Iterator[type[BaseModel]]:
    """Every model reachable from `model` through its fields."""
    if model in seen:
        return
    seen.add(model)
    yield model
    for field in model.model_fields.values():
        for kind in _types(field.annotation):
            if isinstance(kind, type) and issubclass(kind, BaseModel):
                yield from _models(kind, seen)


def _types(annotation) -> Iterator:
    yield annotation
    for arg in typing.get_args(annotation):
        yield from _types(arg)


def _lax_numbers(annotation, field_strict: bool) -> Iterator[str]:
    """The int or bool types in an annotation that are not strict (plain, or in a union)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        base, *metadata = typing.get_args(annotation)
        strict = field_strict or any(isinstance(m, Strict) and m.strict for m in metadata)
        yield from _lax_numbers(base, strict)
    elif annotation in (int, bool) and not field_strict:
        yield annotation.__name__
    elif origin is not None:
        for arg in typing.get_args(annotation):
            yield from _lax_numbers(arg, field_strict)


def test_every_number_and_flag_of_the_cluster_config_is_strict():
    lax = []
    for model in _models(ClusterConfig, set()):
        for name, field in model.model_fields.items():
            field_strict = any(isinstance(m, Strict) and m.strict for m in field.metadata)
            lax += [f"{model.__name__}.{name}: {kind}" for kind in _lax_numbers(field.annotation, field_strict)]
    assert not lax, f"not strict: {lax}"


def _untyped_addresses(annotation, as_text: bool) -> Iterator[str]:
    """The IPv4 address, network or interface types in an annotation that take a number."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        base, *metadata = typing.get_args(annotation)
        text = as_text or any(getattr(m, "func", None) is written_as_text for m in metadata)
        yield from _untyped_addresses(base, text)
    elif annotation in (IPv4Address, IPv4Network, IPv4Interface) and not as_text:
        yield annotation.__name__
    elif origin is not None:
        for arg in typing.get_args(annotation):
            yield from _untyped_addresses(arg, as_text)


def test_every_address_of_the_cluster_config_is_written_as_text():
    numeric = []
    for model in _models(ClusterConfig, set()):
        if model.__module__.startswith("components.aws"):
            continue  # the EC2 part's own config
        for name, field in model.model_fields.items():
            as_text = any(getattr(m, "func", None) is written_as_text for m in field.metadata)
            numeric += [f"{model.__name__}.{name}: {kind}" for kind in _untyped_addresses(field.annotation, as_text)]
    assert not numeric, f"a number passes as an address: {numeric}"


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("nodes.0.nat_address", 170525442),
        ("nodes.1.cluster_address", 10),
        ("web_app.nat_address", 3.0),
        ("network.cluster_bridge.subnet", 170525440),
        ("network.nat_bridge.address", 170525441),
        ("web_app.allowed_sources.0", 167772160),
    ],
)
def test_an_address_is_not_a_number(path, value):
    change = _all(_set("web_app.allowed_sources", ["10.0.0.0/8"]), _set(path, value))
    field = re.sub(r"\.(\d+)", r"[\1]", path)
    assert f"cluster.{field}: {value!r} is a number; write the address as text" in error_after(change)


STRICT_CASES = [
    (twohost_error_after, "hosts.1.retired", "hosts[1].retired", ["yes", "true", 1]),
    (twohost_error_after, "hosts.0.install_packages", "hosts[0].install_packages", ["no", 0, "false"]),
    (
        twohost_error_after,
        "hosts.1.connection.dial_error_limit",
        "hosts[1].connection.ssh.dial_error_limit",
        ["5", 5.0],
    ),
    (error_after, "users.0.uid", "users[0].uid", ["2101", 2101.0, True]),
    (error_after, "users.1.gid", "users[1].gid", ["2002", 2002.0]),
    (error_after, "accounting.keep_dump", "accounting.keep_dump", ["yes", 1, "on"]),
    (error_after, "accounting.restore", "accounting.restore", ["no", 0]),
    (error_after, "accounting.accounts.0.gpus", "accounting.accounts[0].gpus", ["1", 1.0, True]),
    (error_after, "image", "image.keep", [{"keep": "yes"}, {"keep": 1}]),
    (error_after, "slurm.health_check", "slurm.health_check.interval_s", [{"interval_s": "60"}, {"interval_s": 60.0}]),
    (error_after, "accounting.qos", "accounting.qos[0].priority", [[{"name": "high", "priority": "5"}]]),
    (error_after, "accounting.qos", "accounting.qos[0].max_wall_minutes", [[{"name": "q", "max_wall_minutes": 60.0}]]),
]


@pytest.mark.parametrize(
    ("error", "path", "field", "value"),
    [(error, path, field, value) for error, path, field, values in STRICT_CASES for value in values],
)
def test_numbers_and_flags_are_taken_as_written(error, path, field, value):
    change = _set(path, value)
    if path.startswith(("users", "accounting")):
        change = _all(_accounting(), change)
    message = error(change)
    assert re.search(rf"cluster\.{re.escape(field)}: Input should be a valid (integer|boolean)", message), message


@pytest.mark.parametrize(
    "name", ["root", "daemon", "bin", "sys", "nobody", "_apt", "_chrony", "systemd-network", "systemd-x", "slurm"]
)
@pytest.mark.parametrize("field", ["name", "group"])
def test_a_system_account_is_never_a_person(field, name):
    message = error_after(_all(_accounting(), _set(f"users.1.{field}", name)))
    assert f"cluster.users[1].{field}: {name!r} is a system account or group" in message


@pytest.mark.parametrize("name", ["munge", "mysql", "messagebus", "sshd", "sudo", "users", "nogroup", "www-data"])
def test_daemon_accounts_and_system_groups_are_never_a_person(name):
    assert f"cluster.users[0].name: {name!r} is a system account" in error_after(
        _set("users", [PEOPLE[0] | {"name": name}])
    )


@pytest.mark.parametrize("word", ["set", "where"])
@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda w: _accounting(qos=[{"name": w}]), "accounting.qos[0].name"),
        (lambda w: _accounting(accounts=[{"name": w}]), "accounting.accounts[0].name"),
        (
            lambda w: _all(
                _accounting(accounts=[{"name": "physics", "users": [w]}]),
                _set("users", [*PEOPLE, {"name": w, "uid": 2003, "gid": 2003}]),
            ),
            "accounting.accounts[0].users",
        ),
    ],
)
def test_sacctmgr_keywords_are_not_names(word, change, field):
    assert f"cluster.{field}: {word!r} is a word sacctmgr reads as a keyword" in error_after(change(word))


@pytest.mark.parametrize("name", ["c000", "c001", "c003", "web"])
def test_the_database_container_has_a_name_of_its_own(name):
    assert f"cluster.accounting.name: {name!r} is also a node or web_app name" in error_after(_accounting(name=name))


def test_the_database_container_is_not_the_node_image():
    message = error_after(_accounting(name="image"))
    assert "cluster.accounting.name: 'image' would be the container gpu-image" in message


@pytest.mark.parametrize(
    "address",
    ["8.8.8.1/24", "1.2.3.1/24", "127.0.0.1/8", "169.254.1.1/16", "224.0.0.1/24", "240.0.0.1/8", "11.0.0.1/8"],
)
def test_a_nat_bridge_subnet_is_private(address):
    message = error_after(_set("network.nat_bridge.address", address))
    assert f"cluster.network.nat_bridge.address: {address.split('/')[0]}" not in message  # named as a subnet
    assert "cluster.network.nat_bridge.address: " in message and "is not a private network" in message


@pytest.mark.parametrize(
    "subnet", ["8.8.8.0/24", "127.0.0.0/8", "169.254.0.0/16", "239.0.0.0/8", "0.0.0.0/0", "10.0.0.0/7", "100.0.0.0/9"]
)
def test_a_cluster_bridge_subnet_is_private(subnet):
    message = error_after(_set("network.cluster_bridge.subnet", subnet))
    assert f"cluster.network.cluster_bridge.subnet: {subnet} is not a private network" in message


@pytest.mark.parametrize("subnet", ["172.16.5.0/24", "192.168.77.0/24", "100.64.5.0/24", "10.99.0.0/16"])
def test_private_and_shared_subnets_are_accepted(subnet):
    cluster = local_cluster()
    net = IPv4Network(subnet)
    cluster["network"]["cluster_bridge"]["subnet"] = subnet
    for i, node in enumerate(cluster["nodes"]):
        node["cluster_address"] = str(net.network_address + i + 1)
    assert ClusterConfig.model_validate(cluster).network.cluster_bridge.subnet == net


@pytest.mark.parametrize("name", ["all", "default", "lo", "bonding_masters", "lxcbr0", "virbr0", "docker0"])
@pytest.mark.parametrize("bridge", ["nat_bridge", "cluster_bridge"])
def test_a_bridge_does_not_take_a_reserved_interface_name(bridge, name):
    message = error_after(_set(f"network.{bridge}.name", name))
    assert f"cluster.network.{bridge}.name: {name!r} is a name the kernel or another program reserves" in message


@pytest.mark.parametrize("address", ["127.0.0.1", "127.5.5.5", "0.0.0.0", "224.0.0.5", "255.255.255.255"])
def test_a_host_address_is_one_the_others_can_route_through(address):
    message = twohost_error_after(_set("hosts.1.address", address))
    assert f"cluster.hosts[1].address: {address} is a loopback, unspecified, multicast or reserved address" in message


@pytest.mark.parametrize(
    ("address", "subnet"),
    [
        ("10.46.3.7", "hosts[0].network.nat_bridge.address 10.46.3.0/24"),
        ("10.46.5.200", "hosts[0].network.cluster_bridge.subnet 10.46.5.0/24"),
        ("10.47.3.1", "hosts[1].network.nat_bridge.address 10.47.3.0/24"),
        ("10.47.5.9", "hosts[1].network.cluster_bridge.subnet 10.47.5.0/24"),
    ],
)
def test_a_host_address_is_outside_every_container_subnet(address, subnet):
    message = twohost_error_after(_set("hosts.1.address", address))
    assert f"cluster.hosts[1].address: {address} is inside {subnet}, a container subnet" in message


@pytest.mark.parametrize("spelling", ["127.0.0.1", "127.0.0.2", "localhost", "LOCALHOST", "gpu.localhost"])
def test_this_machine_under_any_spelling_is_the_local_host(spelling):
    message = twohost_error_after(_set("hosts.1.connection.address", spelling))
    for field in ("state_dir", "run_dir", "lxc_dir"):
        assert f"cluster.hosts[1].{field}: " in message and "on the same machine (gpu1, gpu2)" in message
    assert "cluster.hosts[1].network.nat_bridge.name: 'duobr0' is also a bridge of hosts[0]" in message


def test_two_ssh_hosts_at_one_name_in_another_case_are_one_machine():
    def change(cluster):
        cluster["hosts"][0]["connection"] = {**cluster["hosts"][1]["connection"], "address": "Gpu2.Example.Org"}
        cluster["hosts"][1]["connection"]["address"] = "gpu2.example.org"

    assert "cluster.hosts[1].state_dir: /var/lib/gpucluster is also hosts[0].state_dir" in twohost_error_after(change)


@pytest.mark.parametrize(
    "address",
    ["127.000.000.001", "127.1", "2130706433", "0x7f000001", "0x7f.1", "a.1", "gpu2-", "a..b", "gpu2.", "1e3"],
)
def test_an_ssh_address_is_an_ipv4_address_or_a_dns_name(address):
    message = twohost_error_after(_set("hosts.1.connection.address", address))
    assert "cluster.hosts[1].connection.ssh.address: " in message
    assert "neither an IPv4 address in dotted decimal" in message or "should match pattern" in message


RUN_DIRS = ["/tmp", "/tmp/run", "/dev/shm", "/dev/shm/r", "/var/tmp/r", "/run/lock/r", "/run/user/1000", "/home/a/r"]
LXC_DIRS = ["/tmp/lxc", "/dev/shm/lxc", "/var/tmp/lxc", "/home/alice/lxc", "/var/lib/lxc/sub", "/var/cache/lxc/x"]
SYSTEM = ["/", "/etc", "/usr", "/var", "/var/lib", "/srv", "/etc/lxc", "/proc/x", "/usr/local/lxc"]


@pytest.mark.parametrize(
    ("field", "path"),
    [("run_dir", p) for p in RUN_DIRS + SYSTEM + ["/var/lib/lxc"]]
    + [("lxc_dir", p) for p in LXC_DIRS + SYSTEM + ["/run", "/run/lxc"]],
)
def test_runtime_and_container_directories_are_checked_like_the_state_directory(field, path):
    message = twohost_error_after(_set(f"hosts.1.{field}", path))
    assert re.search(rf"cluster\.hosts\[1\]\.{field}: {re.escape(path)} is (a system directory|inside /)", message)


@pytest.mark.parametrize("field", ["run_dir", "lxc_dir"])
@pytest.mark.parametrize("path", ["/srv/gpucluster/duo/shared/x", "/srv/gpucluster/duo", "/srv/gpucluster/duo/shared"])
def test_runtime_and_container_directories_are_apart_from_the_shared_directory(field, path):
    message = twohost_error_after(_set(f"hosts.0.{field}", path))
    assert f"cluster.hosts[0].{field}: {path} overlaps hosts[0].shared_dir /srv/gpucluster/duo/shared" in message


@pytest.mark.parametrize("path", ["run", "./run", "/srv/../tmp", "/srv//x", "/srv/./x"])
@pytest.mark.parametrize("field", ["run_dir", "lxc_dir"])
def test_runtime_and_container_directories_are_normalised_absolute_paths(field, path):
    message = twohost_error_after(_set(f"hosts.1.{field}", path))
    assert re.search(rf"cluster\.hosts\[1\]\.{field}: .*(absolute|normalised|should match)", message), message


def test_own_runtime_and_container_directories_are_accepted():
    cluster = twohost()
    cluster["hosts"][1].update(run_dir="/run/gpu2", lxc_dir="/var/lib/lxc-gpu2", state_dir="/srv/gpu2-state")
    config = ClusterConfig.model_validate(cluster)
    assert (config.hosts[1].run_dir, config.hosts[1].lxc_dir) == ("/run/gpu2", "/var/lib/lxc-gpu2")


HOST_KEYS = {
    "ssh-ed25519": "AAAAC3NzaC1lZDI1NTE5AAAAIOC7H2wEZQq/CRsda3+U4IIpegCovId32C67xItBQGer",
    "ecdsa-sha2-nistp256": "AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBNPyUQwvxg17blnpRZRIM7VRcmjHpAakJQ2DT"
    "/Y9VQqFdVHOL93es/pRunzwsbXhhDCFTZmJD+jq7ACDcf6Mgo4=",
    "ecdsa-sha2-nistp384": "AAAAE2VjZHNhLXNoYTItbmlzdHAzODQAAAAIbmlzdHAzODQAAABhBG60g3eN/3euz57b4NevHN4uF8hiCvDyWnMDv"
    "2rKwqmHWc9Aie8d9Q0LEG4qMd3YW2ZZcCNsTnWA2tBe7hOTmjRA57Aki0Nx5dKYrVUCoE1M3hLSVYoEU9ebu3dK6fbp5w==",
    "ecdsa-sha2-nistp521": "AAAAE2VjZHNhLXNoYTItbmlzdHA1MjEAAAAIbmlzdHA1MjEAAACFBADpOy9Yt2Z5wA0axwJAhsbZA/NFRyuJZ7cY"
    "Sf1oOQ+JPzxuNZ/OJQPqDlB0yHj1r8hhOr+maxh0PuFGy8qL/A3owwB14oLOxp9pkFOhxfU0WDBQrdSNgJpxRrK9fkRngP6a1aaJuC5PLaVfVYM6ro"
    "63WnpCxKyDWT1RCD91neSM9Qf1tw==",
    "ssh-rsa": "AAAAB3NzaC1yc2EAAAADAQABAAABAQCoGEhfcwc4pEzXtxjxgPJYGXEpn9LyxR9DK5pXaX0d9RHEIOm3Hd52HizLqZfdO9SLp5e75p"
    "YmLNVi/dxaf1EIn0X7oKXIe9JN6gGcCVLuHuJsw95cVgfq09uqHKQAPRe4C1ZZ31Cm2lnePmKNKVHWLVzY44Wkiksq7+Bgt43fHe0d8T2ed1XifkXrFM"
    "cpX8Md97sNiY3il+OvxEVHXSgGPIbqS2lPgdRqwcRQEqDSK/icVbhjd6Iu9p+AZp9lQ4oM5KwhmsYBhcoL0vUct+4BURYUD3yU7XVLhsjlHzxZGoQVP8"
    "J0ZmqxrIbFPoUfOhxWeRUvuvN/jf+JDTv5zKuR",
}


def _blob(*fields: bytes) -> str:
    return base64.b64encode(b"".join(len(f).to_bytes(4, "big") + f for f in fields)).decode()


@pytest.mark.parametrize(("kind", "data"), HOST_KEYS.items())
def test_host_keys_of_every_type_are_accepted(kind, data):
    cluster = twohost()
    cluster["hosts"][1]["connection"]["host_key"] = f"{kind} {data}"
    assert ClusterConfig.model_validate(cluster).hosts[1].connection.host_key == f"{kind} {data}"


@pytest.mark.parametrize(
    ("kind", "data"),
    [(kind, data) for kind in HOST_KEYS for other, data in HOST_KEYS.items() if other != kind]
    + [
        ("ssh-ed25519", base64.b64encode(b"not a key at all, just text!").decode()),
        ("ssh-ed25519", HOST_KEYS["ssh-ed25519"][:40]),
        ("ssh-ed25519", _blob(b"ssh-ed25519", b"\x01" * 31)),
        ("ssh-ed25519", _blob(b"ssh-ed25519", b"\x01" * 32, b"trailing")),
        ("ssh-rsa", _blob(b"ssh-rsa", b"\x01\x00\x01", b"\x00" + b"\xff" * 96)),  # 768 bits
        ("ssh-rsa", _blob(b"ssh-rsa", b"\x01\x00\x01")),
        ("ecdsa-sha2-nistp256", _blob(b"ecdsa-sha2-nistp256", b"nistp384", b"\x04" + b"\x01" * 64)),
        ("ecdsa-sha2-nistp256", _blob(b"ecdsa-sha2-nistp256", b"nistp256", b"\x02" + b"\x01" * 32)),
    ],
)
def test_a_host_key_holds_a_key_of_its_type(kind, data):
    message = twohost_error_after(_set("hosts.1.connection.host_key", f"{kind} {data}"))
    assert "cluster.hosts[1].connection.ssh.host_key: the key data" in message, message


@pytest.mark.parametrize("max_time", ["0", "00", "0:0", "0:00:00", "0-0", "0-0:0:0", "0-00:00"])
def test_a_partition_time_limit_of_zero_is_refused(max_time):
    message = error_after(_set("slurm.partitions.0.max_time", max_time))
    assert f"cluster.slurm.partitions[0].max_time: {max_time!r} is no time at all" in message


@pytest.mark.parametrize("max_time", ["1", "0:1", "0-1", "INFINITE", "UNLIMITED"])
def test_a_partition_time_limit_above_zero_is_accepted(max_time):
    cluster = local_cluster()
    cluster["slurm"]["partitions"][0]["max_time"] = max_time
    assert ClusterConfig.model_validate(cluster).slurm.partitions[0].max_time == max_time


def test_an_empty_partition_node_list_is_refused_not_read_as_every_node():
    message = error_after(_set("slurm.partitions.0.nodes", []))
    assert "cluster.slurm.partitions[0].nodes: empty; list the partition's nodes, or leave nodes out" in message


@pytest.mark.parametrize("word", ["", "a\nb", "nvidia-smi\n", "\x00", "x\ry", "\t", "a\x7f"])
def test_a_job_command_word_is_not_empty_and_has_no_control_character(word):
    message = error_after(_set("web_app.job_command", ["nvidia-smi", word]))
    assert "cluster.web_app.job_command[1]: String should match pattern" in message


# A config the model refuses is refused before any work in proportion to a value: validated in a
# child process that cannot map more than 1 GiB, each must fail with its field named.
HUGE_CASES = [
    ("local", "gpu", {"stand_in": {"count": 10**9}}, "gpu.stand_in.count: Input should be less than or equal to 64"),
    ("local", "gpu", {"stand_in": {"count": 10**18}}, "gpu.stand_in.count: Input should be less than or equal to 64"),
    ("twohost", "hosts.1.gpu", {"stand_in": {"count": 10**9}}, "hosts[1].gpu.stand_in.count: Input should be less"),
    ("local", "nodes.0.gpus", 10**9, "nodes[0].gpus: Input should be less than or equal to 16"),
    ("local", "nodes.0.cpus", 10**12, "nodes[0].cpus: Input should be less than or equal to 1024"),
    ("local", "web_app.max_connections", 10**9, "web_app.max_connections: Input should be less than or equal to 256"),
    ("local", "web_app.host_port", 10**9, "web_app.host_port: Input should be less than or equal to 65535"),
    ("local", "slurm.partitions.0.nodes", ["c[0-99999999]"], "slurm.partitions[0].nodes[0]: String should match"),
    ("local", "slurm.partitions.0.max_time", "9999999999-0", "max_time: '9999999999-0' is longer than Slurm can count"),
    (
        "twohost",
        "hosts.1.connection.dial_error_limit",
        10**9,
        "connection.ssh.dial_error_limit: Input should be less than or equal",
    ),
]

HUGE_SCRIPT = """
import json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
from components.composition.stack_config import ConfigError, parse_stack_config
for cluster in json.load(sys.stdin):
    try:
        parse_stack_config({"cluster": cluster})
        print("ACCEPTED")
    except ConfigError as error:
        print(json.dumps(str(error)))
"""


def test_huge_values_are_refused_before_any_work_in_proportion_to_them():
    clusters = []
    for stack, path, value, _ in HUGE_CASES:
        cluster = copy.deepcopy(stack_config(stack)["cluster"])
        _set(path, value)(cluster)
        clusters.append(cluster)
    done = subprocess.run(
        [sys.executable, "-c", HUGE_SCRIPT],
        input=json.dumps(clusters),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    messages = [json.loads(line) for line in done.stdout.splitlines()]
    for (_, _, _, expected), message in zip(HUGE_CASES, messages, strict=True):
        assert expected in message, message


def test_a_missing_stack_secret_stops_the_program_before_any_resource(monkeypatch):
    runs = []

    def recording_run(**fields):
        runs.append(ProgramRun(**fields))
        return runs[-1]

    monkeypatch.setattr(review.program, "ProgramRun", recording_run)
    with pytest.raises(ConfigError) as caught:
        run_program(stack_config("twohost"), stack="twohost", secrets={})
    assert runs and runs[0].resources == []
    message = str(caught.value)
    assert "cluster.hosts[1].connection.private_key_secret: the stack has no secret 'gpu2SshKey'" in message
    assert "`./pulumi.sh config set --secret gpu2SshKey --stack twohost < PRIVATE_KEY_FILE`" in message


@pytest.mark.parametrize("port", [1, 80, 443, 1023])
def test_the_web_app_listens_on_a_port_an_unprivileged_user_can_bind(port):
    assert "cluster.web_app.port: Input should be greater than or equal to 1024" in error_after(
        _set("web_app.port", port)
    )


@pytest.mark.parametrize("name", ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset", "nvidia0a"])
def test_a_driver_control_device_is_not_a_gpu(name):
    change = _set("gpu.devices", ["/dev/nvidia0", f"/dev/{name}"])
    assert f"cluster.gpu.devices[1]: /dev/{name} is not a GPU (a GPU is nvidia<N>" in error_after(change)
