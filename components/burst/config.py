"""Typed config of a burst to EC2 (`cluster.burst`): partitions of cloud nodes that Slurm's
power saving starts on demand as EC2 instances and stops when idle. Pulumi owns everything
but the instances: the network and the VPN back to the controller, a launch template per
instance type, the controller's scoped credentials, slurm.conf's cloud lines and the programs
slurmctld runs."""

from ipaddress import IPv4Network
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from components.aws.config import INSTANCE_TYPE_PATTERN, Price, _aws_block_size, _resource_id
from components.aws.prices import VCPUS
from components.common.config_types import (
    DEFAULT_MEMORY_MB_PER_CPU,
    SLURM_RESERVED_PARTITION_NAMES,
    Address,
    Hostname,
    Network,
    StrictInt,
    StrictModel,
)

ZONE_PATTERN = r"^[a-z]{2}(-[a-z]+)+-[0-9][a-z]$"
# AWS keeps the first four addresses and the last of every subnet.
AWS_RESERVED_PER_SUBNET = 5
VpcBlock = Annotated[Network, AfterValidator(_aws_block_size)]


class BurstInstanceType(StrictModel):
    """One instance type of a partition, in the partition's order of preference."""

    name: str = Field(pattern=INSTANCE_TYPE_PATTERN, description="EC2 instance type, e.g. g5.xlarge")
    gpus: StrictInt = Field(ge=0, le=16, description="GPUs of one instance (the node's Gres=gpu:N)")
    price: Price | None = Field(
        None, description="USD per hour; none: the repository's dated table (components/aws/prices.py)"
    )


class BurstSubnet(StrictModel):
    """A subnet the burst instances start in (one per zone: a capacity error in one zone falls
    back to the next)."""

    cidr: VpcBlock = Field(description="the subnet's CIDR, inside burst.vpc_cidr")
    availability_zone: str = Field(pattern=ZONE_PATTERN, description="e.g. us-east-1a")


class BurstPartition(StrictModel):
    """A Slurm partition of cloud nodes `<name>-<n>`, started on demand."""

    name: Hostname = Field(description="partition name; its nodes are <name>-1 ... <name>-<max_nodes>")
    instance_types: list[BurstInstanceType] = Field(
        min_length=1, max_length=8, description="instance types in order of preference"
    )
    max_nodes: StrictInt = Field(ge=1, le=1000, description="the most instances running at once")
    cpus: StrictInt = Field(
        4,
        ge=1,
        le=512,
        description="CPUs Slurm schedules on a node: at most the smallest type's vCPUs (checked for the types "
        "of components/aws/prices.py VCPUS; others unchecked)",
    )
    suspend_time_s: StrictInt = Field(600, ge=10, le=604800, description="SuspendTime: idle seconds before stop")
    resume_timeout_s: StrictInt = Field(
        900, ge=30, le=7200, description="ResumeTimeout: seconds from start to slurmd registered, else DOWN"
    )
    capacity: Literal["on-demand", "spot"] = Field("on-demand", description="on-demand or spot instances")
    memory_mb: StrictInt | None = Field(
        None,
        ge=64,
        le=16777216,
        description="memory Slurm schedules on a node in MB (RealMemory): at most the smallest type's, less "
        "what the system keeps. Default: 1024 per CPU",
    )

    @property
    def memory(self) -> int:
        """The node's schedulable memory in MB (memory_mb, or 1024 per CPU)."""
        return self.memory_mb if self.memory_mb is not None else DEFAULT_MEMORY_MB_PER_CPU * self.cpus

    @model_validator(mode="after")
    def _name_types_and_cpus(self) -> "BurstPartition":
        problems = []
        if self.name.lower() in SLURM_RESERVED_PARTITION_NAMES:
            problems.append(f"name: {self.name!r} is a word Slurm reserves (its defaults line); pick another name")
        names = [t.name for t in self.instance_types]
        for name in sorted({n for n in names if names.count(n) > 1}):
            problems.append(f"instance_types[].name: {name} is listed more than once")
        for j, instance_type in enumerate(self.instance_types):
            vcpus = VCPUS.get(instance_type.name)
            if vcpus is not None and self.cpus > vcpus:
                problems.append(
                    f"cpus: {self.cpus} is more than instance_types[{j}] {instance_type.name} has ({vcpus} vCPUs); "
                    "its nodes would register with fewer and Slurm would mark them invalid"
                )
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def node_names(self) -> list[str]:
        width = len(str(self.max_nodes))
        return [f"{self.name}-{i:0{width}d}" for i in range(1, self.max_nodes + 1)]

    @property
    def gres_gpus(self) -> int:
        """The GPUs every type has: a node never claims GPUs the type it got lacks."""
        return min(t.gpus for t in self.instance_types)


class BurstVpnConfig(StrictModel):
    """AWS site-to-site VPN to the controller's network: routed, no NAT on the path."""

    customer_gateway_address: Address = Field(description="public address of the on-premises VPN router")
    router_address: Address = Field(
        description="the VPN router's on-premises address: the controller's host routes the burst VPC through it"
    )
    bgp_asn: StrictInt = Field(65000, ge=1, le=4294967294, description="the on-premises router's ASN")


class BurstConfig(StrictModel):
    """Where the burst instances start and how they reach the controller."""

    region: str = Field(pattern=r"^[a-z]{2}(-[a-z]+)+-[0-9]$", description="AWS region, e.g. us-east-1")
    ami: str = Field(pattern=_resource_id("ami"), description="pinned AMI id of the burst nodes (Debian 12)")
    vpc_cidr: VpcBlock = Field(IPv4Network("10.90.0.0/16"), description="the burst VPC's CIDR")
    subnets: list[BurstSubnet] = Field(min_length=1, max_length=8, description="subnets in order of preference")
    on_premises_cidrs: list[Network] = Field(
        min_length=1,
        max_length=20,
        description="networks behind the VPN: the controller's address is in one, reached without NAT",
    )
    vpn: BurstVpnConfig
    partitions: list[BurstPartition] = Field(min_length=1, max_length=8)
    root_volume_gib: StrictInt = Field(100, ge=20, le=16384, description="encrypted gp3 root volume, GiB")
    api_endpoint: str | None = Field(
        None,
        pattern=r"^https?://[A-Za-z0-9.:-]+/?$",
        description="EC2 and Secrets Manager endpoint the controller's programs call; none: the region's own",
    )
    capacity_skip_s: StrictInt = Field(
        600, ge=0, le=86400, description="seconds a type is skipped after a capacity error"
    )
    orphan_grace_s: StrictInt = Field(
        300, ge=30, le=86400, description="seconds before the reconciler ends an instance without a node"
    )

    @model_validator(mode="after")
    def _subnets_in_vpc_and_region(self) -> "BurstConfig":
        problems = []
        for i, subnet in enumerate(self.subnets):
            if not subnet.cidr.subnet_of(self.vpc_cidr):
                problems.append(f"subnets[{i}].cidr: {subnet.cidr} is not inside burst.vpc_cidr {self.vpc_cidr}")
            if subnet.availability_zone[:-1] != self.region:
                problems.append(
                    f"subnets[{i}].availability_zone: {subnet.availability_zone} is not a zone of {self.region}"
                )
        for i, a in enumerate(self.subnets):
            for j in range(i):
                if a.cidr.overlaps(self.subnets[j].cidr):
                    problems.append(f"subnets[{i}].cidr: {a.cidr} overlaps subnets[{j}].cidr")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def node_names(self) -> list[str]:
        return [name for partition in self.partitions for name in partition.node_names]

    @property
    def addresses_available(self) -> int:
        return sum(s.cidr.num_addresses - AWS_RESERVED_PER_SUBNET for s in self.subnets)
