"""BurstCloud: the AWS side of a burst partition. Everything but the instances, which Slurm
starts and stops through the controller's programs (components/burst/files/)."""

import base64
import json
from pathlib import Path

import pulumi
import pulumi_aws as aws

from components.aws.site import tags
from components.burst.config import BurstConfig, BurstPartition
from components.common.transport import host_command

FILES = Path(__file__).parent / "files"
ROOT_DEVICE = "/dev/xvda"  # Debian's AMIs
BURST_TAG = "gpucluster:burst"  # on burst instances only (files/burst_common.py selects by it)
SLURM_FROM_ON_PREMISES = "slurmctld, srun and the controller's network to the burst nodes"


def template_name(cluster: str, partition: str, instance_type: str) -> str:
    """`<cluster>-<partition>-<type>`: the resume program finds its templates by these names."""
    return f"{cluster}-{partition}-{instance_type.replace('.', '-')}"


def instance_types(config: BurstConfig) -> list[str]:
    """Every configured type, once, in order: the only ones the controller may launch."""
    return list(dict.fromkeys(t.name for p in config.partitions for t in p.instance_types))


def controller_policy(cluster: str, region: str, arns: dict) -> str:
    """What the controller's programs may do: launch from the cluster's templates only, into
    its subnets, instances of the configured types that carry the cluster's and the burst
    tag; tag what they launch;
    terminate only instances with both tags (the cluster's EC2 hosts carry the cluster's
    only); pass the burst role to EC2; store the munge key in its one secret. Describe calls
    take no resource scope in EC2."""
    statements = [*_launch_statements(cluster, region, arns), *_terminate_and_read_statements(cluster, region)]
    return json.dumps(
        {"Version": "2012-10-17", "Statement": [*statements, *_role_and_secret_statements(arns)]}, sort_keys=True
    )


def _launch_statements(cluster: str, region: str, arns: dict) -> list[dict]:
    """Launch from the cluster's templates, into its subnets, the configured types carrying
    both tags; tag at launch only."""
    instance = f"arn:aws:ec2:{region}:*:instance/*"
    launched = [f"arn:aws:ec2:{region}:*:{kind}/*" for kind in ("volume", "network-interface", "fleet")]
    return [
        {
            "Sid": "LaunchFromTheClusterTemplates",
            "Effect": "Allow",
            "Action": ["ec2:CreateFleet", "ec2:RunInstances"],
            "Resource": [
                *arns["templates"],
                *arns["subnets"],
                arns["security_group"],
                f"arn:aws:ec2:{region}::image/{arns['ami']}",
                *launched,
            ],
        },
        {
            "Sid": "OnlyInstancesTaggedForTheCluster",
            "Effect": "Allow",
            "Action": ["ec2:CreateFleet", "ec2:RunInstances"],
            "Resource": [instance],
            "Condition": {
                "StringEquals": {
                    "aws:RequestTag/gpucluster:cluster": cluster,
                    # Only the configured types: a fleet's overrides could ask for any.
                    "ec2:InstanceType": arns["instance_types"],
                },
                "StringLike": {f"aws:RequestTag/{BURST_TAG}": "*"},
                "ArnLike": {"ec2:LaunchTemplate": arns["templates"]},
            },
        },
        {
            "Sid": "TagAtLaunchOnly",
            "Effect": "Allow",
            "Action": ["ec2:CreateTags"],
            "Resource": [instance, *launched],
            "Condition": {"StringEquals": {"ec2:CreateAction": ["CreateFleet", "RunInstances"]}},
        },
    ]


def _terminate_and_read_statements(cluster: str, region: str) -> list[dict]:
    """Terminate the cluster's burst instances only; describe (EC2 takes no scope there)."""
    return [
        {
            "Sid": "TerminateTheClusterBurstInstancesOnly",
            "Effect": "Allow",
            "Action": ["ec2:TerminateInstances"],
            "Resource": [f"arn:aws:ec2:{region}:*:instance/*"],
            # The cluster's own EC2 hosts carry the cluster tag too: burst ones only.
            "Condition": {
                "StringEquals": {"ec2:ResourceTag/gpucluster:cluster": cluster},
                "StringLike": {f"ec2:ResourceTag/{BURST_TAG}": "*"},
            },
        },
        {
            "Sid": "Read",
            "Effect": "Allow",
            "Action": [
                "ec2:DescribeInstances",
                "ec2:DescribeFleets",
                "ec2:DescribeLaunchTemplates",
                "ec2:DescribeLaunchTemplateVersions",
            ],
            "Resource": "*",
        },
    ]


def _role_and_secret_statements(arns: dict) -> list[dict]:
    """Pass the burst role to EC2; store the munge key in its one secret."""
    return [
        {
            "Sid": "PassTheBurstRoleToEc2",
            "Effect": "Allow",
            "Action": ["iam:PassRole"],
            "Resource": [arns["role"]],
            "Condition": {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}},
        },
        {
            "Sid": "StoreTheMungeKey",
            "Effect": "Allow",
            "Action": ["secretsmanager:PutSecretValue", "secretsmanager:DescribeSecret"],
            "Resource": [arns["secret"]],
        },
    ]


def node_role_policy(secret_arn: str) -> str:
    """A burst node may read the munge key's secret, and nothing else."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {"Effect": "Allow", "Action": ["secretsmanager:GetSecretValue"], "Resource": [secret_arn]},
            ],
        }
    )


class BurstCloud(pulumi.ComponentResource):
    """The burst VPC with a subnet per zone and no internet gateway or NAT: the only way out is
    the site-to-site VPN to the on-premises networks (routed, so slurmctld sees each node's own
    address and connects back to it) and a private Secrets Manager endpoint. A security group
    that admits the on-premises networks and the burst nodes only. The munge key's secret
    (its value is put by the controller, never by this program), the nodes' role that reads
    it, a launch template per partition and instance type, and the controller's credentials,
    scoped to those templates and the cluster's tag.

    `terminator` ends every burst instance of the cluster (never its EC2 hosts) when it is
    deleted: everything here is its dependency, so a destroy deletes it (and the instances)
    first."""

    def __init__(
        self,
        name: str,
        cluster: str,
        config: BurstConfig,
        user_data: str,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("gpu-cluster:burst:BurstCloud", name, None, opts)
        self._prefix, self._cluster, self._config = name, cluster, config
        self.provider = aws.Provider(f"{name}-provider", region=config.region, opts=pulumi.ResourceOptions(parent=self))
        self._child = pulumi.ResourceOptions(parent=self, provider=self.provider)
        vpc, table = self._network()
        self._vpn(vpc, table)
        self._security_group(vpc)
        role, profile = self._munge_key_and_node_role()
        self.templates: dict[tuple[str, str], aws.ec2.LaunchTemplate] = {}
        for partition in config.partitions:
            for instance_type in partition.instance_types:
                self.templates[(partition.name, instance_type.name)] = self._template(
                    partition, instance_type.name, profile, user_data
                )
        key = self._controller_credentials(role)
        # Deleted first on a destroy (everything above is its dependency): ends the instances
        # Slurm started, and waits for them, before the templates, role and network go.
        self.terminator = terminate_on_delete(
            f"{name}-terminate-instances",
            cluster,
            config,
            depends_on=[*self.templates.values(), *self.subnets, *self.routes, self.security_group, profile, key],
            parent=self,
        )
        self.register_outputs(
            {
                "launch_templates": {f"{p}/{t}": lt.name for (p, t), lt in self.templates.items()},
                "secret_id": self.secret.name,
            }
        )

    def _tagged(self, suffix: str, **more: str) -> dict[str, str]:
        return {**tags(f"{self._prefix}-{suffix}", self._cluster, ""), **more}

    def _network(self) -> tuple[aws.ec2.Vpc, aws.ec2.RouteTable]:
        """The VPC, its route table, and a subnet per zone (no public addresses)."""
        name, child, tagged = self._prefix, self._child, self._tagged
        vpc = aws.ec2.Vpc(
            f"{name}-vpc",
            cidr_block=str(self._config.vpc_cidr),
            enable_dns_hostnames=True,
            tags=tagged("vpc"),
            opts=child,
        )
        table = aws.ec2.RouteTable(f"{name}-routes", vpc_id=vpc.id, tags=tagged("routes"), opts=child)
        self.subnets = []
        for i, subnet in enumerate(self._config.subnets):
            made = aws.ec2.Subnet(
                f"{name}-subnet{i}",
                vpc_id=vpc.id,
                cidr_block=str(subnet.cidr),
                availability_zone=subnet.availability_zone,
                map_public_ip_on_launch=False,
                tags=tagged(f"subnet{i}"),
                opts=child,
            )
            aws.ec2.RouteTableAssociation(
                f"{name}-subnet{i}-routes", subnet_id=made.id, route_table_id=table.id, opts=child
            )
            self.subnets.append(made)
        return vpc, table

    def _vpn(self, vpc: aws.ec2.Vpc, table: aws.ec2.RouteTable) -> None:
        """AWS's end (a virtual private gateway on the VPC), the site's router, static routes
        both ways. The tunnels' pre-shared keys are secret outputs of the connection."""
        name, child, tagged, config = self._prefix, self._child, self._tagged, self._config
        gateway = aws.ec2.VpnGateway(f"{name}-vgw", vpc_id=vpc.id, tags=tagged("vgw"), opts=child)
        customer = aws.ec2.CustomerGateway(
            f"{name}-cgw",
            bgp_asn=str(config.vpn.bgp_asn),
            ip_address=str(config.vpn.customer_gateway_address),
            type="ipsec.1",
            tags=tagged("cgw"),
            opts=child,
        )
        self.vpn = aws.ec2.VpnConnection(
            f"{name}-vpn",
            vpn_gateway_id=gateway.id,
            customer_gateway_id=customer.id,
            type="ipsec.1",
            static_routes_only=True,
            tags=tagged("vpn"),
            opts=pulumi.ResourceOptions.merge(
                child, pulumi.ResourceOptions(additional_secret_outputs=["tunnel1PresharedKey", "tunnel2PresharedKey"])
            ),
        )
        self.routes = []
        for j, cidr in enumerate(config.on_premises_cidrs):
            aws.ec2.VpnConnectionRoute(
                f"{name}-vpn-route{j}", vpn_connection_id=self.vpn.id, destination_cidr_block=str(cidr), opts=child
            )
            self.routes.append(
                aws.ec2.Route(
                    f"{name}-route{j}",
                    route_table_id=table.id,
                    destination_cidr_block=str(cidr),
                    gateway_id=gateway.id,
                    opts=child,
                )
            )

    def _security_group(self, vpc: aws.ec2.Vpc) -> None:
        """The nodes' group (the on-premises networks and each other), and the private
        Secrets Manager endpoint behind it."""
        name, child, tagged, config = self._prefix, self._child, self._tagged, self._config
        self.security_group = aws.ec2.SecurityGroup(
            f"{name}-sg",
            vpc_id=vpc.id,
            description=f"gpu-cluster {self._cluster} burst nodes: the on-premises networks and each other",
            ingress=[
                aws.ec2.SecurityGroupIngressArgs(
                    protocol="-1",
                    from_port=0,
                    to_port=0,
                    cidr_blocks=[str(c) for c in config.on_premises_cidrs],
                    description=SLURM_FROM_ON_PREMISES,
                ),
                aws.ec2.SecurityGroupIngressArgs(
                    protocol="-1", from_port=0, to_port=0, self=True, description="the burst nodes to each other"
                ),
            ],
            egress=[
                aws.ec2.SecurityGroupEgressArgs(
                    protocol="-1", from_port=0, to_port=0, cidr_blocks=["0.0.0.0/0"], description="out: VPN, endpoint"
                )
            ],
            tags=tagged("sg"),
            opts=child,
        )
        aws.ec2.VpcEndpoint(
            f"{name}-secrets-endpoint",
            vpc_id=vpc.id,
            service_name=f"com.amazonaws.{config.region}.secretsmanager",
            vpc_endpoint_type="Interface",
            private_dns_enabled=True,
            subnet_ids=[s.id for s in self.subnets],
            security_group_ids=[self.security_group.id],
            tags=tagged("secrets-endpoint"),
            opts=child,
        )

    def _munge_key_and_node_role(self) -> tuple[aws.iam.Role, aws.iam.InstanceProfile]:
        """The munge key's place (only its value is secret, and this program never holds it),
        and the nodes' role and instance profile that may read it."""
        name, child, tagged, cluster = self._prefix, self._child, self._tagged, self._cluster
        self.secret = aws.secretsmanager.Secret(
            f"{name}-munge-key",
            name=f"gpucluster/{cluster}/munge-key",
            description=f"munge key of gpu-cluster {cluster}, put by its controller",
            recovery_window_in_days=0,
            tags=tagged("munge-key"),
            opts=child,
        )
        role = aws.iam.Role(
            f"{name}-node-role",
            assume_role_policy=json.dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [
                        {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}
                    ],
                }
            ),
            tags=tagged("node-role"),
            opts=child,
        )
        aws.iam.RolePolicy(
            f"{name}-node-policy", role=role.id, policy=self.secret.arn.apply(node_role_policy), opts=child
        )
        profile = aws.iam.InstanceProfile(
            f"{name}-node-profile", role=role.name, tags=tagged("node-profile"), opts=child
        )
        return role, profile

    def _controller_credentials(self, role: aws.iam.Role) -> aws.iam.AccessKey:
        """The controller's own user: an access key it keeps, scoped by controller_policy."""
        name, child, cluster, config = self._prefix, self._child, self._cluster, self._config
        user = aws.iam.User(f"{name}-controller", path="/gpucluster/", tags=self._tagged("controller"), opts=child)
        arns = pulumi.Output.all(
            templates=[t.arn for t in self.templates.values()],
            subnets=[s.arn for s in self.subnets],
            security_group=self.security_group.arn,
            role=role.arn,
            secret=self.secret.arn,
        ).apply(
            lambda a: controller_policy(
                cluster,
                config.region,
                {**a, "ami": config.ami, "instance_types": instance_types(config)},
            )
        )
        aws.iam.UserPolicy(f"{name}-controller-policy", user=user.name, policy=arns, opts=child)
        key = aws.iam.AccessKey(
            f"{name}-controller-key",
            user=user.name,
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(additional_secret_outputs=["secret"])),
        )
        # Secret as a whole: it travels to the controller by stdin only.
        self.credentials = pulumi.Output.secret(
            pulumi.Output.all(key.id, key.secret).apply(
                lambda k: json.dumps({"aws_access_key_id": k[0], "aws_secret_access_key": k[1]})
            )
        )
        return key

    def _template(self, partition: BurstPartition, instance_type: str, profile, user_data):
        config = self._config
        label = f"{partition.name}-{instance_type.replace('.', '-')}"
        burst_tags = self._tagged(f"{label}", **{BURST_TAG: partition.name})
        return aws.ec2.LaunchTemplate(
            f"{self._prefix}-{label}",
            name=template_name(self._cluster, partition.name, instance_type),
            image_id=config.ami,
            instance_type=instance_type,
            vpc_security_group_ids=[self.security_group.id],
            iam_instance_profile=aws.ec2.LaunchTemplateIamInstanceProfileArgs(arn=profile.arn),
            metadata_options=aws.ec2.LaunchTemplateMetadataOptionsArgs(
                http_endpoint="enabled",
                http_tokens="required",
                http_put_response_hop_limit=1,
                http_protocol_ipv6="disabled",  # the boot script's IMDS rule covers its IPv4 address
                instance_metadata_tags="enabled",
            ),
            block_device_mappings=[
                aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
                    device_name=ROOT_DEVICE,
                    ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
                        volume_size=config.root_volume_gib,
                        volume_type="gp3",
                        encrypted="true",
                        delete_on_termination="true",
                    ),
                )
            ],
            # No market options: EC2 Fleet refuses templates that carry them; the resume
            # program asks for spot or on-demand capacity in each fleet request.
            # The boot without a node name (the resume program gives each launch its own);
            # it holds no secret: anyone with EC2 read access sees it.
            user_data=pulumi.Output.from_input(user_data).apply(_base64),
            tag_specifications=[
                aws.ec2.LaunchTemplateTagSpecificationArgs(resource_type=kind, tags=burst_tags)
                for kind in ("instance", "volume")
            ],
            update_default_version=True,
            tags=burst_tags,
            opts=pulumi.ResourceOptions(parent=self, provider=self.provider),
        )


def _base64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def terminate_on_delete(name: str, cluster: str, config: BurstConfig, depends_on: list, parent) -> pulumi.Resource:
    """The destroy hook: files/terminate_instances_delete.sh with the aws CLI where `pulumi` runs."""
    return host_command(
        name,
        create=FILES / "terminate_instances_create.sh",
        delete=FILES / "terminate_instances_delete.sh",
        environment={
            "CLUSTER": cluster,
            "REGION": config.region,
            **({"AWS_ENDPOINT_URL": config.api_endpoint} if config.api_endpoint else {}),
        },
        opts=pulumi.ResourceOptions(parent=parent, depends_on=depends_on),
    )
