"""Typed config of the EC2 part of a stack: the account side (`cluster.aws`) and the
connection of a host that is an EC2 instance (`hosts[].connection: {kind: ec2}`)."""

from ipaddress import IPv4Network, collapse_addresses
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Discriminator,
    Field,
    Strict,
    Tag,
    field_validator,
    model_validator,
)

from components.common.config_types import StrictBool, StrictInt, StrictModel

# An authorized key as OpenSSH writes it (ssh-keygen's .pub), comment allowed.
PUBLIC_KEY_PATTERN = (
    r"^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)) [A-Za-z0-9+/]+={0,3}( [A-Za-z0-9@._-]{0,64})?$"
)
SECRET_NAME_PATTERN = r"^[A-Za-z][A-Za-z0-9_-]{0,63}$"
INSTANCE_TYPE_PATTERN = r"^[a-z][a-z0-9-]*\.[a-z0-9]+$"


def _resource_id(prefix: str) -> str:
    """AWS resource ids: the prefix and 8 (older) or 17 hexadecimal digits, nothing between."""
    return rf"^{prefix}-([0-9a-f]{{8}}|[0-9a-f]{{17}})$"


def _written_as_text(value: object) -> object:
    # A network is written as text ("10.0.0.0/16"): a bare number would be taken as an address.
    if isinstance(value, (str, IPv4Network)):
        return value
    raise ValueError("Input should be a network written as text, e.g. 10.0.0.0/16")


Network = Annotated[IPv4Network, BeforeValidator(_written_as_text)]


def _aws_block_size(network: IPv4Network) -> IPv4Network:
    # AWS refuses VPCs and subnets smaller than /28 or larger than /16.
    if not 16 <= network.prefixlen <= 28:
        raise ValueError(f"AWS allows VPC and subnet sizes from /16 to /28, not {network}")
    return network


VpcBlock = Annotated[Network, AfterValidator(_aws_block_size)]
Price = Annotated[float, Strict(), Field(gt=0, le=10000, description="USD per hour")]


class SpotConfig(StrictModel):
    """Run the instance on spot capacity, as a one-time request: AWS ends the request with the
    instance, so a destroy or a replacement leaves no open request that would launch untracked
    instances. One-time spot capacity only terminates when AWS takes it back; the state volume
    survives, and the next `pulumi up --refresh` makes the instance again."""

    interruption: Literal["terminate"] = Field(
        "terminate",
        description="what AWS does when it takes the capacity back: terminate (stop and hibernate need a "
        "persistent request, which outlives the instance)",
    )
    max_price: str | None = Field(
        None, pattern=r"^[0-9]{1,4}(\.[0-9]{1,6})?$", description="USD per hour; none: up to the on-demand price"
    )

    @field_validator("max_price")
    @classmethod
    def _positive(cls, value: str | None) -> str | None:
        if value is not None and float(value) <= 0:
            raise ValueError(f"a spot max price must be above 0, not {value} (leave it out: up to the on-demand price)")
        return value


class Ec2Connection(StrictModel):
    """The host is an EC2 instance the program creates, reached over SSH (root, by key)."""

    kind: Literal["ec2"]
    instance_type: str = Field(pattern=INSTANCE_TYPE_PATTERN, description="EC2 instance type, e.g. g5.xlarge")
    private_key_secret: str = Field(
        pattern=SECRET_NAME_PATTERN,
        description="name of the stack's secret config key holding the private half of aws.ssh_public_key",
    )
    root_volume_gib: StrictInt = Field(200, ge=20, le=16384, description="encrypted gp3 root volume, GiB")
    state_volume_gib: StrictInt = Field(
        100,
        ge=1,
        le=16384,
        description="encrypted gp3 volume that outlives the instance: state_dir, shared_dir and lxc_dir live on it",
    )
    spot: SpotConfig | None = Field(None, description="spot capacity; none: on demand")
    ssh_via: Literal["public", "private"] = Field(
        "public",
        description="address `pulumi up` connects to: an Elastic IP of the instance, or its fixed private one "
        "(VPN, peering)",
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

    cidr: VpcBlock = Field(IPv4Network("10.80.0.0/16"), description="the VPC's CIDR (/16 to /28)")
    subnet_cidr: VpcBlock = Field(IPv4Network("10.80.1.0/24"), description="the instances' subnet (/16 to /28)")
    availability_zone: str | None = Field(
        None, pattern=r"^[a-z]{2}(-[a-z]+)+-[0-9][a-z]$", description="e.g. us-east-1a; none: AWS picks"
    )


class ExistingVpcConfig(StrictModel):
    """A VPC that exists: the program adds its security group, instances and routes."""

    vpc_id: str = Field(pattern=_resource_id("vpc"))
    subnet_id: str = Field(pattern=_resource_id("subnet"))
    subnet_cidr: VpcBlock = Field(description="the subnet's CIDR (the instances' private addresses are in it)")
    route_table_id: str = Field(
        pattern=_resource_id("rtb"),
        description="the subnet's route table: routes to the container subnets go there",
    )


EXISTING_VPC_KEYS = ("vpc_id", "subnet_id", "route_table_id")


def _vpc_kind(value) -> str:
    """Which of the two the user wrote: an existing VPC names its ids, a new one does not. The
    errors are then the branch's own, not the other branch's missing fields beside them."""
    if isinstance(value, ExistingVpcConfig) or (isinstance(value, dict) and any(k in value for k in EXISTING_VPC_KEYS)):
        return "existing"
    return "new"


VpcConfig = Annotated[
    Annotated[NewVpcConfig, Tag("new")] | Annotated[ExistingVpcConfig, Tag("existing")], Discriminator(_vpc_kind)
]


class AwsConfig(StrictModel):
    """Where and how the EC2 hosts of the cluster are made."""

    region: str = Field(pattern=r"^[a-z]{2}(-[a-z]+)+-[0-9]$", description="AWS region, e.g. us-east-1")
    ami: str = Field(
        pattern=_resource_id("ami"),
        description="AMI id, pinned (tools/aws-ami.sh prints today's): a new AMI release never shows as a replacement",
    )
    ami_os: Literal["debian-12", "ubuntu-22.04"] = Field(
        "debian-12", description="the AMI's OS (see the README's support matrix)"
    )
    ssh_public_key: str = Field(pattern=PUBLIC_KEY_PATTERN, description="login key of the instances (EC2 key pair)")
    admin_cidrs: list[Network] = Field(
        min_length=1, max_length=20, description="networks allowed to SSH and to the web port"
    )
    allow_ssh_from_anywhere: StrictBool = Field(
        False, description="allow admin_cidrs that add up to the whole internet (explicitly)"
    )
    vpc: VpcConfig = Field(
        NewVpcConfig(), description="a new VPC (cidr, subnet_cidr), or an existing one (vpc_id, subnet_id, ...)"
    )
    placement_group: StrictBool = Field(False, description="a cluster placement group for the instances")
    instance_profile: str | None = Field(
        None, pattern=r"^[A-Za-z0-9+=,.@_-]{1,128}$", description="IAM instance profile; none: no role"
    )
    site: str = Field("", pattern=r"^[A-Za-z0-9 ._:/=+@-]{0,64}$", description="the `site` tag")
    prices: dict[Annotated[str, Field(pattern=INSTANCE_TYPE_PATTERN)], Price] = Field(
        {}, description="USD per hour by instance type, over the repository's dated table (components/aws/prices.py)"
    )

    @model_validator(mode="after")
    def _admin_networks_are_not_the_internet(self) -> "AwsConfig":
        # Several halves add up to 0.0.0.0/0 as surely as 0.0.0.0/0 itself.
        if (
            list(collapse_addresses(self.admin_cidrs)) == [IPv4Network("0.0.0.0/0")]
            and not self.allow_ssh_from_anywhere
        ):
            listed = " + ".join(str(cidr) for cidr in self.admin_cidrs)
            raise ValueError(
                f"admin_cidrs: {listed} opens SSH to the whole internet; name your networks, "
                "or set aws.allow_ssh_from_anywhere: true to mean it"
            )
        return self

    @model_validator(mode="after")
    def _zone_in_region(self) -> "AwsConfig":
        zone = getattr(self.vpc, "availability_zone", None)
        if zone is not None and zone[:-1] != self.region:
            raise ValueError(f"vpc.availability_zone: {zone} is not a zone of aws.region {self.region}")
        return self
