"""`cluster.burst`: each rule names its field."""

import pytest

from components.composition.stack_config import ConfigError, parse_stack_config
from tests.burst.stack import burst_stack


def error_after(change) -> str:
    config = burst_stack()
    change(config["cluster"])
    with pytest.raises(ConfigError) as caught:
        parse_stack_config(config)
    return str(caught.value)


def test_the_burst_stack_parses_with_its_nodes():
    burst = parse_stack_config(burst_stack()).cluster.burst
    assert burst.node_names == ["burst-1", "burst-2", "burst-3", "burst-4"]
    assert burst.partitions[0].gres_gpus == 1 and burst.addresses_available == 2 * 251


def _partition(c) -> dict:
    return c["burst"]["partitions"][0]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda c: _partition(c)["instance_types"].append({"name": "g9.xlarge", "gpus": 1}),
            "burst.partitions[0].instance_types[2].price: no price for g9.xlarge in us-east-1",
        ),
        (
            lambda c: c["burst"]["subnets"].append({"cidr": "10.42.3.0/24", "availability_zone": "us-east-1c"}),
            "burst.vpc_cidr",  # outside the VPC first...
        ),
        (
            lambda c: c["burst"].update(
                vpc_cidr="10.42.0.0/16",
                on_premises_cidrs=["10.42.3.0/24"],
                subnets=[{"cidr": "10.42.5.0/24", "availability_zone": "us-east-1a"}],
            ),
            "burst.subnets[0].cidr: 10.42.5.0/24 overlaps network.cluster_bridge.subnet 10.42.5.0/24",
        ),
        (
            lambda c: _partition(c).update(max_nodes=600),
            "burst.partitions[].max_nodes: 600 nodes in all, but burst.subnets hold 502 instances",
        ),
        (
            lambda c: c["burst"].update(on_premises_cidrs=["192.168.0.0/16"]),
            "burst.on_premises_cidrs: the controller's address 10.42.3.2 is in none of them",
        ),
        (
            lambda c: c["burst"].update(on_premises_cidrs=["10.0.0.0/8"]),
            "burst.on_premises_cidrs[0]: 10.0.0.0/8 overlaps burst.vpc_cidr 10.90.0.0/16",
        ),
        (
            lambda c: c["burst"]["vpn"].update(router_address="10.42.3.254"),
            "burst.vpn.router_address: 10.42.3.254 is inside the burst VPC or a container subnet",
        ),
        (lambda c: _partition(c).update(name="tutorial"), "burst.partitions[0].name: 'tutorial' is also"),
        (
            lambda c: c["burst"]["subnets"][1].update(availability_zone="us-west-2a"),
            "subnets[1].availability_zone: us-west-2a is not a zone of us-east-1",
        ),
        (lambda c: _partition(c).update(instance_types=[]), "cluster.burst.partitions[0].instance_types"),
        (lambda c: _partition(c).update(capacity="reserved"), "cluster.burst.partitions[0].capacity: Input should be"),
        (lambda c: c["burst"].update(ami="debian-latest"), "cluster.burst.ami"),
    ],
)
def test_burst_rules_name_the_field(change, message):
    assert message in error_after(change)


def test_a_price_given_for_a_type_outside_the_table_is_accepted():
    config = burst_stack()
    _partition(config["cluster"])["instance_types"].append({"name": "g9.xlarge", "gpus": 1, "price": 2.5})
    assert parse_stack_config(config).cluster.burst.partitions[0].instance_types[2].price == 2.5


@pytest.mark.parametrize(
    ("change", "message"),
    [
        # N9: `PartitionName=default` is Slurm's defaults line: the partition would not exist.
        (
            lambda c: _partition(c).update(name="default"),
            "cluster.burst.partitions[0].name: 'default' is a word Slurm reserves",
        ),
        # N11: the same type twice registered one launch template twice (a duplicate URN in `up`).
        (
            lambda c: _partition(c)["instance_types"].append({"name": "g5.xlarge", "gpus": 1}),
            "instance_types[].name: g5.xlarge is listed more than once",
        ),
        # N11: more CPUs than the type has: every node would register invalid.
        (lambda c: _partition(c).update(cpus=512), "cpus: 512 is more than instance_types[0] g5.xlarge has (4 vCPUs)"),
    ],
)
def test_burst_partitions_that_slurm_or_ec2_would_refuse_later_are_refused_now(change, message):
    assert message in error_after(change)


def test_cpus_of_a_type_outside_the_vcpu_table_are_not_checked():
    config = burst_stack()
    _partition(config["cluster"]).update(instance_types=[{"name": "g9.xlarge", "gpus": 1, "price": 2.5}], cpus=64)
    assert parse_stack_config(config).cluster.burst.partitions[0].cpus == 64


def _served_twohost_with_burst() -> dict:
    import copy

    from tests.burst.stack import BURST
    from tests.harness.program_harness import stack_config

    config = copy.deepcopy(stack_config("twohost"))
    config["cluster"]["shared_fs"] = {"kind": "served", "directory": "/srv/gpucluster/duo/export"}
    config["cluster"]["users"] = [{"name": "alice", "uid": 2101, "gid": 2101}]
    config["cluster"]["burst"] = {**copy.deepcopy(BURST), "on_premises_cidrs": ["192.168.10.0/24", "10.46.0.0/16"]}
    return config


def test_burst_nodes_mount_the_served_export_and_make_the_cluster_s_people():
    """N4: burst nodes had neither users[] nor shared_dir."""
    from components.sharedfs.shared_fs import burst_mount, export_clients
    from tests.harness.command_executor import unwrap
    from tests.harness.program_harness import run_program

    config = _served_twohost_with_burst()
    cluster = parse_stack_config(config).cluster
    assert burst_mount(cluster) == "192.168.10.11:2049:/gpucluster-duo"
    assert export_clients(cluster) == ["192.168.10.11", "192.168.10.12", "10.90.1.0/24", "10.90.2.0/24"]
    secrets = {"gpu2SshKey": "-----BEGIN OPENSSH PRIVATE KEY-----\nx\n-----END OPENSSH PRIVATE KEY-----\n"}
    run = run_program(config, stack="twohost", secrets=secrets)
    (template, *_) = run.of_type("aws:ec2/launchTemplate:LaunchTemplate")
    import base64

    user_data = base64.b64decode(unwrap(template.inputs["userData"])).decode()
    assert "PEOPLE=alice:2101:2101:alice\n" in user_data
    assert "SHARED_DIR=/srv/gpucluster/duo/shared\n" in user_data
    assert "SHARED_MOUNT=192.168.10.11:2049:/gpucluster-duo\n" in user_data


def test_a_shared_filesystem_burst_nodes_cannot_reach_is_refused():
    config = _served_twohost_with_burst()
    config["cluster"]["burst"]["on_premises_cidrs"] = ["10.46.0.0/16"]
    with pytest.raises(ConfigError, match=r"burst.on_premises_cidrs: the shared_fs server's address 192.168.10.11"):
        parse_stack_config(config)
