"""One EC2 GPU instance as a cluster host: its SSH host key, first boot, and the route of its
container subnet through it."""

from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network

import pulumi
import pulumi_aws as aws
import pulumi_tls as tls

from components.aws.config import AwsConfig, Ec2Connection
from components.aws.site import Ec2Site, tags
from components.aws.user_data import render_user_data


@dataclass(frozen=True)
class InstanceSpec:
    """The host as its instance sees it: the cluster's name, the instance's fixed private
    address (the other hosts route its containers through it) and its NAT subnet."""

    cluster: str
    connection: Ec2Connection
    private_ip: IPv4Address
    container_subnet: IPv4Network


class Ec2Host(pulumi.ComponentResource):
    """An instance of the pinned AMI with IMDSv2 required and a hop limit of 1 (containers behind
    NAT cannot reach the instance's metadata), an encrypted gp3 root volume, source/dest check
    off (it routes its containers' subnet), no role unless configured, optional spot and
    placement group. Its user data (a secret: it carries the host key) installs the host key
    generated here, so `ssh_address` + `host_key` pin the connection before the machine
    exists. A change of the user data replaces the instance: cloud-init runs it at first boot
    only. The VPC routes the container subnet to the instance's network interface."""

    def __init__(
        self,
        name: str,
        config: AwsConfig,
        spec: InstanceSpec,
        site: Ec2Site,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("gpu-cluster:aws:Ec2Host", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=site.provider)
        connection = spec.connection
        self.host_key = tls.PrivateKey(
            f"{name}-host-key", algorithm="ED25519", opts=pulumi.ResourceOptions(parent=self)
        )
        user_data = pulumi.Output.all(self.host_key.private_key_openssh, self.host_key.public_key_openssh).apply(
            lambda keys: render_user_data(spec.cluster, keys[0], keys[1], config.ssh_public_key)
        )
        spot = connection.spot
        self.instance = aws.ec2.Instance(
            f"{name}-instance",
            ami=config.ami,
            instance_type=connection.instance_type,
            subnet_id=site.subnet_id,
            private_ip=str(spec.private_ip),
            associate_public_ip_address=connection.ssh_via == "public",
            vpc_security_group_ids=[site.security_group_id],
            key_name=site.key_pair.key_name,
            source_dest_check=False,
            iam_instance_profile=config.instance_profile,
            placement_group=site.placement_group.id if site.placement_group else None,
            metadata_options=aws.ec2.InstanceMetadataOptionsArgs(
                http_endpoint="enabled", http_tokens="required", http_put_response_hop_limit=1
            ),
            root_block_device=aws.ec2.InstanceRootBlockDeviceArgs(
                volume_type="gp3",
                volume_size=connection.root_volume_gib,
                encrypted=True,
                delete_on_termination=True,
                tags=tags(f"{name}-root", spec.cluster, config.site),
            ),
            instance_market_options=aws.ec2.InstanceInstanceMarketOptionsArgs(
                market_type="spot",
                spot_options=aws.ec2.InstanceInstanceMarketOptionsSpotOptionsArgs(
                    instance_interruption_behavior=spot.interruption,
                    # stop and hibernate need a persistent request
                    spot_instance_type="one-time" if spot.interruption == "terminate" else "persistent",
                    max_price=spot.max_price,
                ),
            )
            if spot
            else None,
            user_data=pulumi.Output.secret(user_data),
            user_data_replace_on_change=True,
            tags=tags(f"{name}-instance", spec.cluster, config.site),
            opts=child,
        )
        self.route = aws.ec2.Route(
            f"{name}-route",
            route_table_id=site.route_table_id,
            destination_cidr_block=str(spec.container_subnet),
            network_interface_id=self.instance.primary_network_interface_id,
            opts=child,
        )
        self.ssh_address = self.instance.public_ip if connection.ssh_via == "public" else self.instance.private_ip
        # The pinned key: the public half, without a comment.
        self.host_public_key = self.host_key.public_key_openssh.apply(lambda key: " ".join(key.split()[:2]))
        self.register_outputs(
            {"instance_id": self.instance.id, "ssh_address": self.ssh_address, "host_key": self.host_public_key}
        )
