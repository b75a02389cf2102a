"""What the EC2 hosts of a cluster share: the network, the security group, the key pair and
the placement group, all in the stack's region and tagged with cluster, stack and site."""

from dataclasses import dataclass
from ipaddress import IPv4Network

import pulumi
import pulumi_aws as aws

from components.aws.config import AwsConfig, NewVpcConfig

SSH_PORT = 22


def tags(name: str, cluster: str, site: str) -> dict[str, str]:
    """Tags on everything the program makes in AWS (`gpucluster:*` find them in the console)."""
    return {
        "Name": name,
        "gpucluster:cluster": cluster,
        "gpucluster:stack": pulumi.get_stack(),
        "gpucluster:site": site,
    }


@dataclass(frozen=True)
class SiteSpec:
    """The cluster as the EC2 site sees it: its name, the container subnets routed to its
    instances (CIDR rules: a group-to-group rule does not match those addresses), and the
    host ports of the web app and forwards on its instances."""

    cluster: str
    routed_subnets: tuple[IPv4Network, ...]
    web_ports: tuple[int, ...]


class Ec2Site(pulumi.ComponentResource):
    """VPC, subnet, internet gateway and route table (or the configured existing ones), a
    security group that admits SSH and the web ports from the admin networks only, traffic
    between the cluster's instances and from the routed container subnets, and nothing else;
    the key pair of the configured public key; an optional cluster placement group.
    `availability_zone` is the subnet's: the instances' state volumes are made there (from the
    subnet, never from an instance, so replacing an instance never replaces its volume)."""

    def __init__(self, name: str, config: AwsConfig, spec: SiteSpec, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-cluster:aws:Ec2Site", name, None, opts)
        self._prefix, self._config, self._spec = name, config, spec
        self.provider = aws.Provider(f"{name}-provider", region=config.region, opts=pulumi.ResourceOptions(parent=self))
        self._child = pulumi.ResourceOptions(parent=self, provider=self.provider)
        if isinstance(config.vpc, NewVpcConfig):
            self._new_network(config.vpc)
        else:
            self.vpc_id = pulumi.Output.from_input(config.vpc.vpc_id)
            self.subnet_id = pulumi.Output.from_input(config.vpc.subnet_id)
            self.route_table_id = pulumi.Output.from_input(config.vpc.route_table_id)
            self.availability_zone = aws.ec2.get_subnet_output(
                id=config.vpc.subnet_id, opts=pulumi.InvokeOptions(parent=self, provider=self.provider)
            ).availability_zone
        self._security_group()
        self.key_pair = aws.ec2.KeyPair(
            f"{name}-key", public_key=config.ssh_public_key, tags=self._tagged("key"), opts=self._child
        )
        self.placement_group = (
            aws.ec2.PlacementGroup(
                f"{name}-placement", strategy="cluster", tags=self._tagged("placement"), opts=self._child
            )
            if config.placement_group
            else None
        )
        self.register_outputs(
            {
                "vpc_id": self.vpc_id,
                "subnet_id": self.subnet_id,
                "route_table_id": self.route_table_id,
                "security_group_id": self.security_group_id,
            }
        )

    def _tagged(self, suffix: str) -> dict[str, str]:
        return tags(f"{self._prefix}-{suffix}", self._spec.cluster, self._config.site)

    def _new_network(self, vpc: NewVpcConfig) -> None:
        """A new VPC with one subnet, an internet gateway and the subnet's default route."""
        name, child, tagged = self._prefix, self._child, self._tagged
        made = aws.ec2.Vpc(
            f"{name}-vpc", cidr_block=str(vpc.cidr), enable_dns_hostnames=True, tags=tagged("vpc"), opts=child
        )
        subnet = aws.ec2.Subnet(
            f"{name}-subnet",
            vpc_id=made.id,
            cidr_block=str(vpc.subnet_cidr),
            availability_zone=vpc.availability_zone,
            map_public_ip_on_launch=False,  # only instances that ask for one (ssh_via: public)
            tags=tagged("subnet"),
            opts=child,
        )
        gateway = aws.ec2.InternetGateway(f"{name}-igw", vpc_id=made.id, tags=tagged("igw"), opts=child)
        table = aws.ec2.RouteTable(f"{name}-routes", vpc_id=made.id, tags=tagged("routes"), opts=child)
        aws.ec2.Route(
            f"{name}-route-default",
            route_table_id=table.id,
            destination_cidr_block="0.0.0.0/0",
            gateway_id=gateway.id,
            opts=child,
        )
        aws.ec2.RouteTableAssociation(f"{name}-subnet-routes", subnet_id=subnet.id, route_table_id=table.id, opts=child)
        self.vpc_id, self.subnet_id, self.route_table_id = made.id, subnet.id, table.id
        self.availability_zone = subnet.availability_zone

    def _security_group(self) -> None:
        """The group and its rules: admin SSH and web, the instances, the routed containers, out."""
        name, spec, tagged = self._prefix, self._spec, self._tagged
        group = aws.ec2.SecurityGroup(
            f"{name}-sg",
            vpc_id=self.vpc_id,
            # AWS allows no apostrophe in descriptions.
            description=f"gpu-cluster {spec.cluster}: admin SSH and web, the cluster instances and containers",
            tags=tagged("sg"),
            opts=self._child,
        )
        self.security_group_id = group.id
        rule = pulumi.ResourceOptions(parent=self, provider=self.provider, depends_on=[group])
        for i, cidr in enumerate(self._config.admin_cidrs):
            for port in (SSH_PORT, *spec.web_ports):
                aws.vpc.SecurityGroupIngressRule(
                    f"{name}-in-admin{i}-{port}",
                    security_group_id=group.id,
                    cidr_ipv4=str(cidr),
                    ip_protocol="tcp",
                    from_port=port,
                    to_port=port,
                    description=f"admin {cidr} to port {port}",
                    tags=tagged(f"in-admin{i}-{port}"),
                    opts=rule,
                )
        aws.vpc.SecurityGroupIngressRule(
            f"{name}-in-cluster",
            security_group_id=group.id,
            referenced_security_group_id=group.id,
            ip_protocol="-1",
            description="the cluster instances to each other (Slurm, srun, routed container traffic)",
            tags=tagged("in-cluster"),
            opts=rule,
        )
        for subnet_cidr in spec.routed_subnets:
            suffix = f"in-containers-{str(subnet_cidr).replace('/', '-')}"
            aws.vpc.SecurityGroupIngressRule(
                f"{name}-{suffix}",
                security_group_id=group.id,
                cidr_ipv4=str(subnet_cidr),
                ip_protocol="-1",
                description=f"the cluster containers of {subnet_cidr} (routed: no group rule matches them)",
                tags=tagged(suffix),
                opts=rule,
            )
        aws.vpc.SecurityGroupEgressRule(
            f"{name}-out",
            security_group_id=group.id,
            cidr_ipv4="0.0.0.0/0",
            ip_protocol="-1",
            description="out: package mirrors, the other instances",
            tags=tagged("out"),
            opts=rule,
        )
