"""moto's EC2 as the burst programs' AWS: the network and the launch templates the program
declares (recorded under mocks) made in it, the programs' config and credentials, a Slurm
stand-in, and capacity errors injected into CreateFleet (moto never runs out)."""

import base64
import functools
import json
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

import boto3
import hostlist
from moto.core.botocore_stubber import BotocoreStubber
from moto.core.responses import ActionResult
from moto.ec2.responses.fleets import Fleets

from components.burst.programs import program_config
from components.burst.user_data import render_user_data
from components.composition.stack_config import parse_stack_config
from tests.burst.stack import burst_stack
from tests.harness.command_executor import unwrap
from tests.harness.program_harness import run_program

FILES = Path(__file__).parents[2] / "components" / "burst" / "files"
sys.path.insert(0, str(FILES))  # the programs import burst_common as they do on the controller
REGION = "us-east-1"


@functools.cache
def recorded_templates() -> list[dict]:
    """The launch templates' inputs as the program registers them."""
    run = run_program(burst_stack(), stack="burst")
    return [r.inputs for r in run.of_type("aws:ec2/launchTemplate:LaunchTemplate")]


def _template_data(inputs: dict, security_group: str, profile_arn: str) -> dict:
    """A registered launch template's inputs, as CreateLaunchTemplate takes them."""
    metadata = inputs["metadataOptions"]
    data = {
        "ImageId": inputs["imageId"],
        "InstanceType": inputs["instanceType"],
        "SecurityGroupIds": [security_group],
        "IamInstanceProfile": {"Arn": profile_arn},
        "MetadataOptions": {
            "HttpEndpoint": metadata["httpEndpoint"],
            "HttpTokens": metadata["httpTokens"],
            "HttpPutResponseHopLimit": int(metadata["httpPutResponseHopLimit"]),
            "InstanceMetadataTags": metadata["instanceMetadataTags"],
        },
        "BlockDeviceMappings": [
            {
                "DeviceName": m["deviceName"],
                "Ebs": {
                    "VolumeSize": int(m["ebs"]["volumeSize"]),
                    "VolumeType": m["ebs"]["volumeType"],
                    "Encrypted": m["ebs"]["encrypted"] == "true",
                    "DeleteOnTermination": m["ebs"]["deleteOnTermination"] == "true",
                },
            }
            for m in inputs["blockDeviceMappings"]
        ],
        "UserData": unwrap(inputs["userData"]),
        "TagSpecifications": [
            {"ResourceType": s["resourceType"], "Tags": [{"Key": k, "Value": v} for k, v in s["tags"].items()]}
            for s in inputs["tagSpecifications"]
        ],
    }
    return data


@contextmanager
def one_request_at_a_time():
    """moto's in-process EC2 answers one request at a time, as EC2 itself answers concurrent
    calls: the resume program launches its fleets from several threads, and moto's backends are
    not thread-safe (two CreateFleet calls at once advance one subnet's address generator
    together: `ValueError: generator already executing`)."""
    lock = threading.Lock()
    original = BotocoreStubber.__call__

    def serialised(self, *args, **kwargs):
        with lock:
            return original(self, *args, **kwargs)

    BotocoreStubber.__call__ = serialised
    try:
        yield
    finally:
        BotocoreStubber.__call__ = original


class AwsWorld:
    """The burst VPC, its subnets, security group and launch templates in moto."""

    def __init__(self, tmp_path: Path, endpoint: str | None = None):
        self.ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=endpoint)
        cluster = parse_stack_config(burst_stack()).cluster
        burst = cluster.burst
        vpc = self.ec2.create_vpc(CidrBlock=str(burst.vpc_cidr))["Vpc"]["VpcId"]
        self.subnets = [
            self.ec2.create_subnet(VpcId=vpc, CidrBlock=str(s.cidr), AvailabilityZone=s.availability_zone)["Subnet"][
                "SubnetId"
            ]
            for s in burst.subnets
        ]
        group = self.ec2.create_security_group(GroupName="burst", Description="burst", VpcId=vpc)["GroupId"]
        iam = boto3.client("iam", region_name=REGION, endpoint_url=endpoint)
        profile = iam.create_instance_profile(InstanceProfileName="gpu-burst-node")["InstanceProfile"]["Arn"]
        self.templates = {}
        for inputs in recorded_templates():
            made = self.ec2.create_launch_template(
                LaunchTemplateName=inputs["name"], LaunchTemplateData=_template_data(inputs, group, profile)
            )
            self.templates[inputs["name"]] = made["LaunchTemplate"]["LaunchTemplateId"]
        self.user_data = render_user_data(
            cluster.controller_address, REGION, "gpucluster/gpu/munge-key", None, cluster.munge_socket
        )
        config = program_config("gpu", burst, self.subnets, self.user_data)
        credentials = tmp_path / "credentials"
        credentials.write_text(json.dumps({"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}))
        state = tmp_path / "state"
        state.mkdir()
        config |= {"credentials_file": str(credentials), "state_dir": str(state), "log_file": str(tmp_path / "log")}
        config["endpoint_url"] = endpoint
        self.config_file = tmp_path / "burst.json"
        self.config_file.write_text(json.dumps(config))
        self.config = config

    def live(self) -> list[dict]:
        pages = self.ec2.describe_instances(
            Filters=[
                {"Name": "tag:gpucluster:cluster", "Values": ["gpu"]},
                {"Name": "instance-state-name", "Values": ["pending", "running"]},
            ]
        )
        return [i for r in pages["Reservations"] for i in r["Instances"]]

    def user_data_of(self, instance_id: str) -> str:
        value = self.ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")["UserData"]
        return base64.b64decode(value["Value"]).decode()


class FakeSlurm:
    """scontrol's part the programs use: hostlists, node updates (recorded), node states."""

    def __init__(self, nodes: dict[str, dict[str, str]] | None = None):
        self.updates: list[tuple[list[str], dict]] = []
        self.node_fields = nodes or {}

    def hostnames(self, hostlist_text: str) -> list[str]:
        return hostlist.expand_hostlist(hostlist_text)

    def update(self, nodes: list[str], **settings: str) -> None:
        self.updates.append((list(nodes), settings))

    def nodes(self) -> dict[str, dict[str, str]]:
        return self.node_fields


@contextmanager
def no_capacity_for(*instance_types: str):
    """CreateFleet as EC2 answers when a type has no capacity: HTTP 200, that type's configs
    left out, an Errors[] entry for each; no instance when no type is left."""
    original = Fleets.create_fleet

    def create_fleet(self):
        configs = self._get_param("LaunchTemplateConfigs", [])
        kept, errors = [], []
        for config in configs:
            name = config["LaunchTemplateSpecification"]["LaunchTemplateName"]
            template = self.ec2_backend.get_launch_template_by_name(name)
            kind = template.latest_version().data["InstanceType"]
            if kind in instance_types:
                errors.append(
                    {
                        "LaunchTemplateAndOverrides": {
                            "LaunchTemplateSpecification": {"LaunchTemplateName": name, "Version": "$Latest"},
                            "Overrides": {"InstanceType": kind},
                        },
                        "Lifecycle": "on-demand",
                        "ErrorCode": "InsufficientInstanceCapacity",
                        "ErrorMessage": "We currently do not have sufficient capacity in the Availability Zone",
                    }
                )
            else:
                kept.append(config)
        if not kept:
            return ActionResult({"FleetId": "fleet-00000000000000000", "Instances": [], "Errors": errors})
        fleet = self.ec2_backend.create_fleet(
            on_demand_options=self._get_param("OnDemandOptions", {}),
            spot_options=self._get_param("SpotOptions", {}),
            target_capacity_specification=self._get_param("TargetCapacitySpecification", {}),
            launch_template_configs=kept,
            excess_capacity_termination_policy=None,
            replace_unhealthy_instances=False,
            terminate_instances_with_expiration=True,
            fleet_type=self._get_param("Type"),
            valid_from=None,
            valid_until=None,
            tag_specifications=self._get_param("TagSpecifications", []),
        )
        return ActionResult({"FleetId": fleet.id, "Instances": fleet.instances or [], "Errors": errors})

    Fleets.create_fleet = create_fleet
    try:
        yield
    finally:
        Fleets.create_fleet = original
