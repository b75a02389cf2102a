"""EC2 hosts under mocks: the AWS graph of the example stack (stacks/Pulumi.ec2.yaml), its edges
(instance -> wait for SSH -> the host's commands), its secrets, its config rules and its cost."""

import copy
import json
import re

import pytest

from components.aws.prices import HOURS_PER_MONTH, PRICES
from components.composition.stack_config import ConfigError, parse_stack_config
from tests.harness.command_executor import unwrap
from tests.harness.program_harness import ROOT, run_program, stack_config

PRIVATE_KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nthe-login-key\n-----END OPENSSH PRIVATE KEY-----\n"
SECRETS = {"awsSshKey": PRIVATE_KEY}
REMOTE = "command:remote:Command"
INSTANCE, ROUTE, RULE = "aws:ec2/instance:Instance", "aws:ec2/route:Route", "aws:vpc/securityGroupIngressRule"
ATTACHMENT, ASSOCIATION = "aws:ec2/volumeAttachment:VolumeAttachment", "aws:ec2/eipAssociation:EipAssociation"


@pytest.fixture(scope="module")
def run():
    return run_program(stack_config("ec2"), stack="ec2", secrets=SECRETS)


def aws_resources(run):
    return [r for r in run.resources if r.custom and r.type.startswith("aws:") and not r.type.startswith("pulumi:")]


def config_error(change) -> str:
    config = copy.deepcopy(stack_config("ec2"))
    change(config["cluster"])
    with pytest.raises(ConfigError) as caught:
        parse_stack_config(config)
    return str(caught.value)


def test_network_a_vpc_with_subnet_gateway_and_route_table(run):
    vpc = run.by_name("cloud-aws-vpc")
    assert vpc.inputs["cidrBlock"] == "10.80.0.0/16"
    subnet = run.by_name("cloud-aws-subnet")
    assert subnet.inputs["cidrBlock"] == "10.80.1.0/24" and subnet.inputs["availabilityZone"] == "us-east-1a"
    assert run.by_name("cloud-aws-route-default").inputs["destinationCidrBlock"] == "0.0.0.0/0"
    assert run.depends_on("cloud-aws-route-default", "cloud-aws-igw")
    assert run.depends_on("cloud-aws-subnet-routes", "cloud-aws-routes")
    # The region comes from the typed config, through the stack's own provider.
    assert run.by_name("cloud-aws-provider").inputs["region"] == "us-east-1"


def test_each_host_routes_its_container_subnet_through_its_instance(run):
    routes = {r.name: r for r in run.of_type(ROUTE)}
    assert routes["cloud-cloud1-ec2-route"].inputs["destinationCidrBlock"] == "10.81.3.0/24"
    assert routes["cloud-cloud2-ec2-route"].inputs["destinationCidrBlock"] == "10.82.3.0/24"
    for host in ("cloud1", "cloud2"):
        route = routes[f"cloud-{host}-ec2-route"]
        assert route.inputs["networkInterfaceId"].startswith("eni-")
        assert run.depends_on(route.name, f"cloud-{host}-ec2-instance")
        assert run.by_name(f"cloud-{host}-ec2-instance").inputs["sourceDestCheck"] is False


def test_security_group_admits_admins_the_cluster_and_its_container_subnets_only(run):
    rules = {
        (r.inputs.get("cidrIpv4") or "group", r.inputs["ipProtocol"], r.inputs.get("fromPort"))
        for r in run.resources
        if r.type.startswith(RULE)
    }
    assert rules == {
        ("203.0.113.0/24", "tcp", 22),
        ("203.0.113.0/24", "tcp", 7000),  # the web app's forward on cloud1
        ("group", "-1", None),
        ("10.81.3.0/24", "-1", None),
        ("10.82.3.0/24", "-1", None),
    }
    assert run.by_name("cloud-aws-in-cluster").inputs["referencedSecurityGroupId"] == "cloud-aws-sg-id"
    egress = [r for r in run.resources if r.type.startswith("aws:vpc/securityGroupEgressRule")]
    assert [r.inputs["cidrIpv4"] for r in egress] == ["0.0.0.0/0"]


def test_instances_pinned_ami_imdsv2_hop_limit_encrypted_gp3_no_role(run):
    config = parse_stack_config(stack_config("ec2")).cluster
    for host in ("cloud1", "cloud2"):
        instance = run.by_name(f"cloud-{host}-ec2-instance")
        inputs = instance.inputs
        assert inputs["ami"] == config.aws.ami == "ami-0a1b2c3d4e5f67890"
        assert inputs["instanceType"] == "g5.xlarge"
        assert inputs["metadataOptions"] == {
            "httpEndpoint": "enabled",
            "httpTokens": "required",
            "httpPutResponseHopLimit": 1,
        }
        root = inputs["rootBlockDevice"]
        assert (root["volumeType"], root["encrypted"], root["volumeSize"]) == ("gp3", True, 200)
        assert "iamInstanceProfile" not in inputs
        assert inputs["userDataReplaceOnChange"] is True
        assert inputs["privateIp"] == str(config.host_named(host).address)
        assert inputs["placementGroup"] == "cloud-aws-placement-id"
    assert run.by_name("cloud-aws-placement").inputs["strategy"] == "cluster"
    assert "instanceMarketOptions" not in run.by_name("cloud-cloud1-ec2-instance").inputs
    spot = run.by_name("cloud-cloud2-ec2-instance").inputs["instanceMarketOptions"]
    # One-time: the request ends with its instance, so a destroy leaves nothing that launches more.
    assert spot == {
        "marketType": "spot",
        "spotOptions": {"instanceInterruptionBehavior": "terminate", "spotInstanceType": "one-time"},
    }


def test_no_lookup_of_the_latest_ami_in_the_graph():
    """A most_recent lookup would make every AMI release a replacement in previews."""
    for path in (ROOT / "components" / "aws").glob("*.py"):
        assert not re.search(r"get_ami|most_recent", path.read_text()), path


def test_tags_on_everything(run):
    untaggable = (ROUTE, "aws:ec2/routeTableAssociation:RouteTableAssociation", ATTACHMENT, ASSOCIATION)
    taggable = [r for r in aws_resources(run) if r.type not in untaggable]
    assert len(taggable) >= 16
    assert {"aws:ebs/volume:Volume", "aws:ec2/eip:Eip"} <= {r.type for r in taggable}
    for resource in taggable:
        tags = resource.inputs["tags"]
        assert tags["gpucluster:cluster"] == "cloud" and tags["gpucluster:stack"] == "ec2", resource.name
        assert tags["gpucluster:site"] == "example-site" and tags["Name"] == resource.name, resource.name
    assert run.by_name("cloud-cloud1-ec2-instance").inputs["rootBlockDevice"]["tags"]["gpucluster:cluster"] == "cloud"


def test_instance_then_wait_for_ssh_then_the_hosts_commands_deleted_with_it(run):
    for host in ("cloud1", "cloud2"):
        instance = run.by_name(f"cloud-{host}-ec2-instance")
        ready = run.by_name(f"cloud-{host}-ssh-ready")
        assert run.depends_on(ready.name, instance.name)
        commands = [r for r in run.of_type(REMOTE) if r.name.startswith(f"cloud-{host}-") or _on(run, r, host)]
        assert len(commands) >= 10
        for command in commands:
            assert command.deleted_with == instance.urn, command.name
            if command.name != ready.name:
                assert run.depends_on(command.name, ready.name), command.name
        connection = unwrap(run.by_name(f"cloud-{host}-sshd-accept-env").inputs["connection"])
        # The Elastic IP (the mocks give those 203.0.113.x), once it points at the instance.
        assert connection["host"].startswith("203.0.113."), connection["host"]
        assert run.depends_on(ready.name, f"cloud-{host}-ec2-address-association")
        # The pinned host key is what the instance printed to its console (read after it exists).
        reader = run.by_name(f"cloud-{host}-ec2-host-key")
        assert run.depends_on(reader.name, instance.name) and run.depends_on(ready.name, reader.name)


def _on(run, resource, host) -> bool:
    """Whether a remote command runs on `host` (node commands carry the node's name, not the host's)."""
    connection = unwrap(resource.inputs["connection"])
    ready = unwrap(run.by_name(f"cloud-{host}-ssh-ready").inputs["connection"])
    return connection["host"] == ready["host"]


def test_no_secret_in_any_readable_input(run):
    for resource in run.resources:
        readable = {k: v for k, v in resource.inputs.items() if k not in resource.secret_paths}
        text = json.dumps(readable)
        assert "PRIVATE KEY" not in text and "the-login-key" not in text, resource.name


def test_the_user_data_holds_no_key_and_nothing_makes_one(run):
    """AWS serves user data to anyone allowed ec2:DescribeInstanceAttribute: no host key in it."""
    assert not [r for r in run.resources if r.type.startswith("tls:")]
    for host in ("cloud1", "cloud2"):
        instance = run.by_name(f"cloud-{host}-ec2-instance")
        user_data = unwrap(instance.inputs["userData"])
        assert "PRIVATE KEY" not in user_data and "ssh_keys" not in user_data
        assert instance.secret_paths == set(), instance.secret_paths


def test_cost_of_two_g5_xlarge(run):
    cost = run.outputs["cost"]
    assert cost["instances"] == {"g5.xlarge": {"count": 2, "hourly_usd": PRICES["us-east-1"]["g5.xlarge"]}}
    assert cost["hourly_usd"] == 2.012 and cost["monthly_usd"] == round(2.012 * HOURS_PER_MONTH, 2) == 1468.76
    doc = (ROOT / "docs" / "ec2.md").read_text()
    assert '"hourly_usd": 2.012' in doc and '"monthly_usd": 1468.76' in doc


def test_a_price_override_wins():
    config = copy.deepcopy(stack_config("ec2"))
    config["cluster"]["aws"]["prices"] = {"g5.xlarge": 0.5}
    cost = run_program(config, stack="ec2", secrets=SECRETS).outputs["cost"]
    assert cost["hourly_usd"] == 1.0 and "aws.prices" in cost["prices"]


def test_stacks_without_ec2_hosts_register_nothing_of_aws():
    for stack in ("e2e", "twohost"):
        run = run_program(stack_config(stack), stack=stack, secrets={"gpu2SshKey": PRIVATE_KEY})
        assert not [r for r in run.resources if "aws" in r.type] and "cost" not in run.outputs


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda c: c["aws"].update(admin_cidrs=["0.0.0.0/0"]),
            "cluster.aws.admin_cidrs: 0.0.0.0/0 opens SSH to the whole internet",
        ),
        (
            lambda c: c["hosts"][0].update(address="10.80.2.11"),
            "hosts[0].address: 10.80.2.11 is not a usable address of aws.vpc.subnet_cidr 10.80.1.0/24",
        ),
        (
            lambda c: c["hosts"][0].update(address="10.80.1.2"),
            "hosts[0].address: 10.80.1.2 is not a usable address of aws.vpc.subnet_cidr 10.80.1.0/24",
        ),
        (
            lambda c: c["hosts"][1]["network"]["nat_bridge"].update(address="10.80.9.1/24"),
            "hosts[1].network.nat_bridge.address: 10.80.9.0/24 overlaps the VPC 10.80.0.0/16",
        ),
        (
            lambda c: c["slurm"].update(controller={"placement": "host", "host": "cloud1"}),
            "slurm.controller.placement: 'host' on the EC2 host 'cloud1'",
        ),
        (
            lambda c: c["hosts"][1]["connection"].update(instance_type="g9.xlarge"),
            "hosts[1].connection.instance_type: no price for g9.xlarge in us-east-1",
        ),
        (lambda c: c.pop("aws"), "hosts[0].connection: kind ec2 needs cluster.aws"),
        (lambda c: c["hosts"][0].update(retired=True), "hosts[0].retired: an EC2 host goes with its instance"),
        (lambda c: c["aws"].update(ami="ubuntu-latest"), "cluster.aws.ami: String should match pattern"),
        (lambda c: c["hosts"][0]["connection"].update(user="admin"), "cluster.hosts[0].connection.ec2.user"),
    ],
)
def test_ec2_config_rules(change, message):
    assert message in config_error(change)


def test_ssh_from_anywhere_only_when_said():
    config = copy.deepcopy(stack_config("ec2"))
    config["cluster"]["aws"].update(admin_cidrs=["0.0.0.0/0"], allow_ssh_from_anywhere=True)
    assert parse_stack_config(config).cluster.aws.allow_ssh_from_anywhere


def test_aws_without_ec2_hosts_is_refused():
    config = copy.deepcopy(stack_config("twohost"))
    config["cluster"]["aws"] = copy.deepcopy(stack_config("ec2")["cluster"]["aws"])
    with pytest.raises(ConfigError, match=r"aws: no host has connection\.kind ec2"):
        parse_stack_config(config)


def test_the_ami_lookup_asks_ssm_and_prints_a_pinnable_id(tmp_path):
    import os
    import subprocess

    fake = tmp_path / "aws"
    fake.write_text('#!/bin/sh\necho "$@" > "$(dirname "$0")/args"\necho ami-0123456789abcdef0\n')
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    tool = str(ROOT / "tools" / "aws-ami.sh")
    done = subprocess.run([tool, "us-east-1"], capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0 and done.stdout == "ami-0123456789abcdef0\n", done.stderr
    assert (tmp_path / "args").read_text().split()[:6] == [
        "ssm", "get-parameter", "--region", "us-east-1", "--name", "/aws/service/debian/release/bookworm/latest/amd64"
    ]  # fmt: skip
    done = subprocess.run([tool, "us-east-1", "ubuntu-22.04"], capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0 and "base-oss-nvidia-driver-gpu-ubuntu-22.04" in (tmp_path / "args").read_text()
    refused = subprocess.run([tool, "not a region"], capture_output=True, text=True, env=env, check=False)
    assert refused.returncode == 2 and "usage" in refused.stderr
