"""Typed config of the EC2 part of a stack: the account side (`cluster.aws`) and the
connection of a host that is an EC2 instance (`hosts[].connection: {kind: ec2}`)."""

from ipaddress import IPv4Network
from typing import Literal

from pydantic import Field

from components.config_types import StrictBool, StrictInt, StrictModel

# An authorized key as OpenSSH writes it (ssh-keygen's .pub), comment allowed.
PUBLIC_KEY_PATTERN = (
    r"^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)) [A-Za-z0-9+/]+={0,3}( [A-Za-z0-9@._-]{0,64})?$"
)
SECRET_NAME_PATTERN = r"^[A-Za-z][A-Za-z0-9_-]{0,63}$"


class SpotConfig(StrictModel):
    """Run the instance on spot capacity. A spot stop and start is a reboot: the host's boot
    unit brings the cluster's part back, as on any host."""

    interruption: Literal["stop", "hibernate", "terminate"] = Field(
        "stop", description="what AWS does when it takes the capacity back (stop: the disk stays)"
    )
    max_price: str | None = Field(
        None, pattern=r"^[0-9]{1,4}(\.[0-9]{1,6})?$", description="USD per hour; none: up to the on-demand price"
    )


class Ec2Connection(StrictModel):
    """The host is an EC2 instance the program creates, reached over SSH (root, by key)."""

    kind: Literal["ec2"]
    instance_type: str = Field(pattern=r"^[a-z][a-z0-9-]*\.[a-z0-9]+$", description="EC2 instance type, e.g. g5.xlarge")
    private_key_secret: str = Field(
        pattern=SECRET_NAME_PATTERN,
        description="name of the stack's secret config key holding the private half of aws.ssh_public_key",
    )
    root_volume_gib: StrictInt = Field(200, ge=20, le=16384, description="encrypted gp3 root volume, GiB")
    spot: SpotConfig | None = Field(None, description="spot capacity; none: on demand")
    ssh_via: Literal["public", "private"] = Field(
        "public", description="address `pulumi up` connects to: the public one, or the private one (VPN, peering)"
    )
    dial_error_limit: StrictInt = Field(
        60, ge=-1, le=1000, description="failed dials before a command gives up (first boot takes minutes)"
    )

    # The login: root by the configured key (cloud-init's disable_root: false).
    user: Literal["root"] = "root"
    port: Literal[22] = 22
    bastion: None = None


class NewVpcConfig(StrictModel):
    """A VPC the program creates: one subnet, an internet gateway and a route table."""

    cidr: IPv4Network = Field(IPv4Network("10.80.0.0/16"), description="the VPC's CIDR")
    subnet_cidr: IPv4Network = Field(IPv4Network("10.80.1.0/24"), description="the instances' subnet")
    availability_zone: str | None = Field(
        None, pattern=r"^[a-z]{2}(-[a-z]+)+-[0-9][a-z]$", description="e.g. us-east-1a; none: AWS picks"
    )


class ExistingVpcConfig(StrictModel):
    """A VPC that exists: the program adds its security group, instances and routes."""

    vpc_id: str = Field(pattern=r"^vpc-[0-9a-f]{8,17}$")
    subnet_id: str = Field(pattern=r"^subnet-[0-9a-f]{8,17}$")
    subnet_cidr: IPv4Network = Field(description="the subnet's CIDR (the instances' private addresses are in it)")
    route_table_id: str = Field(
        pattern=r"^rtb-[0-9a-f]{8,17}$",
        description="the subnet's route table: routes to the container subnets go there",
    )


class AwsConfig(StrictModel):
    """Where and how the EC2 hosts of the cluster are made."""

    region: str = Field(pattern=r"^[a-z]{2}(-[a-z]+)+-[0-9]$", description="AWS region, e.g. us-east-1")
    ami: str = Field(
        pattern=r"^ami-[0-9a-f]{8,17}$",
        description="AMI id, pinned (tools/aws-ami.sh prints today's): a new AMI release never shows as a replacement",
    )
    ami_os: Literal["debian-12", "ubuntu-22.04"] = Field(
        "debian-12", description="the AMI's OS (see the README's support matrix)"
    )
    ssh_public_key: str = Field(pattern=PUBLIC_KEY_PATTERN, description="login key of the instances (EC2 key pair)")
    admin_cidrs: list[IPv4Network] = Field(
        min_length=1, max_length=20, description="networks allowed to SSH and to the web port"
    )
    allow_ssh_from_anywhere: StrictBool = Field(False, description="allow 0.0.0.0/0 in admin_cidrs (explicitly)")
    vpc: NewVpcConfig | ExistingVpcConfig = Field(NewVpcConfig(), description="a new VPC, or an existing one")
    placement_group: StrictBool = Field(False, description="a cluster placement group for the instances")
    instance_profile: str | None = Field(
        None, pattern=r"^[A-Za-z0-9+=,.@_-]{1,128}$", description="IAM instance profile; none: no role"
    )
    site: str = Field("", pattern=r"^[A-Za-z0-9 ._:/=+@-]{0,64}$", description="the `site` tag")
    prices: dict[str, float] = Field(
        {}, description="USD per hour by instance type, over the repository's dated table (components/aws/prices.py)"
    )
