"""One EC2 GPU instance as a cluster host: its state volume, its address, the SSH host key it
made, its first boot, and the route of its container subnet through it."""

from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network

import pulumi
import pulumi_aws as aws

from components.aws.config import AwsConfig, Ec2Connection
from components.aws.site import Ec2Site, tags
from components.aws.user_data import FILES, HOST_KEY_TYPE, STATE_DEVICE_NAME, StateVolume, render_user_data
from components.common.transport import host_command


@dataclass(frozen=True)
class InstanceSpec:
    """The host as its instance sees it: the cluster's name, the instance's fixed private
    address (the other hosts route its containers through it), its NAT subnet, and the
    directories the cluster keeps its state in on it (state_dir, shared_dir, lxc_dir)."""

    cluster: str
    connection: Ec2Connection
    private_ip: IPv4Address
    container_subnet: IPv4Network
    state_directories: tuple[str, ...]


class Ec2Host(pulumi.ComponentResource):
    """An instance of the pinned AMI with IMDSv2 required and a hop limit of 1 (containers behind
    NAT cannot reach the instance's metadata), an encrypted gp3 root volume, source/dest check
    off (it routes its containers' subnet), no role unless configured, optional one-time spot
    and placement group. The VPC routes the container subnet to its network interface.

    Replacing it (AMI, login key, subnet...) deletes it before making the new one, which takes
    over its fixed private address; what the cluster keeps lives on a separate encrypted gp3
    volume that is never deleted by the program (retain_on_delete) and goes from the old
    instance to the new one. The new instance makes a new host key: every command of the host
    sees its connection change and runs its create again on the new machine.

    `ssh_address` survives a stop and start: an Elastic IP (ssh_via public) or the fixed
    private address. `host_key` is what the instance printed to its console, read through the
    EC2 API: the user data holds no secret."""

    def __init__(
        self,
        name: str,
        config: AwsConfig,
        spec: InstanceSpec,
        site: Ec2Site,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("gpu-cluster:aws:Ec2Host", name, None, opts)
        self._prefix, self._config, self._spec, self._site = name, config, spec, site
        self._child = pulumi.ResourceOptions(parent=self, provider=site.provider)
        self._state_volume()
        self._instance()
        self._attach_and_route()
        self._address()
        # The host key the instance made, from its console (after the state volume is mounted:
        # cloud-init prints it at the end of the first boot). A new instance, a new key.
        self.host_key_reader = host_command(
            f"{name}-host-key",
            create=FILES / "host_key_from_console.sh",
            environment={"REGION": config.region, "INSTANCE_ID": self.instance.id, "KEY_TYPE": HOST_KEY_TYPE},
            triggers=[self.instance.id],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.state_attachment]),
        )
        self.host_public_key = self.host_key_reader.stdout.apply(lambda out: " ".join(out.split()[:2]))
        self.register_outputs(
            {
                "instance_id": self.instance.id,
                "ssh_address": self.ssh_address,
                "host_key": self.host_public_key,
                "state_volume_id": self.state_volume.id,
            }
        )

    def _tagged(self, suffix: str) -> dict[str, str]:
        return tags(f"{self._prefix}-{suffix}", self._spec.cluster, self._config.site)

    def _state_volume(self) -> None:
        """The volume the cluster keeps its state on, which outlives every instance."""
        self.state_volume = aws.ebs.Volume(
            f"{self._prefix}-state",
            availability_zone=self._site.availability_zone,
            size=self._spec.connection.state_volume_gib,
            type="gp3",
            encrypted=True,
            tags=self._tagged("state"),
            # Users' files, the Slurm queue and the containers outlive the instance, and a
            # destroy too: delete the volume by hand (its id is the output state_volume_id).
            opts=pulumi.ResourceOptions.merge(self._child, pulumi.ResourceOptions(retain_on_delete=True)),
        )

    def _instance(self) -> None:
        """The instance, its first boot mounting the state volume."""
        config, spec, site, tagged = self._config, self._spec, self._site, self._tagged
        connection = spec.connection
        user_data = self.state_volume.id.apply(
            lambda volume_id: render_user_data(
                spec.cluster, config.ssh_public_key, StateVolume(volume_id, spec.state_directories)
            )
        )
        self.instance = aws.ec2.Instance(
            f"{self._prefix}-instance",
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
                tags=tagged("root"),
            ),
            instance_market_options=_spot_options(connection),
            user_data=user_data,
            user_data_replace_on_change=True,  # cloud-init runs it at first boot only
            tags=tagged("instance"),
            # The new instance takes over the fixed private address: the old one goes first.
            opts=pulumi.ResourceOptions.merge(self._child, pulumi.ResourceOptions(delete_before_replace=True)),
        )

    def _attach_and_route(self) -> None:
        """The state volume on the instance; the container subnet routed to it."""
        self.state_attachment = aws.ec2.VolumeAttachment(
            f"{self._prefix}-state-attachment",
            device_name=STATE_DEVICE_NAME,
            volume_id=self.state_volume.id,
            instance_id=self.instance.id,
            # Not detached from a running instance (its filesystem is mounted): the instance's
            # termination detaches it, and the volume waits for the next one.
            skip_destroy=True,
            opts=self._child,
        )
        self.route = aws.ec2.Route(
            f"{self._prefix}-route",
            route_table_id=self._site.route_table_id,
            destination_cidr_block=str(self._spec.container_subnet),
            network_interface_id=self.instance.primary_network_interface_id,
            opts=self._child,
        )

    def _address(self) -> None:
        """Where SSH reaches the host: an Elastic IP (ssh_via public) or the private address."""
        name, child = self._prefix, self._child
        if self._spec.connection.ssh_via != "public":
            self.elastic_ip = None
            self.ssh_address = self.instance.private_ip
            return
        # The instance's own public address changes at every stop and start; this one stays.
        self.elastic_ip = aws.ec2.Eip(f"{name}-address", domain="vpc", tags=self._tagged("address"), opts=child)
        association = aws.ec2.EipAssociation(
            f"{name}-address-association",
            allocation_id=self.elastic_ip.allocation_id,
            instance_id=self.instance.id,
            opts=child,
        )
        # The address, once it points at the instance.
        self.ssh_address = pulumi.Output.all(association.id, self.elastic_ip.public_ip).apply(lambda v: v[1])


def _spot_options(connection: Ec2Connection) -> aws.ec2.InstanceInstanceMarketOptionsArgs | None:
    spot = connection.spot
    if not spot:
        return None
    return aws.ec2.InstanceInstanceMarketOptionsArgs(
        market_type="spot",
        spot_options=aws.ec2.InstanceInstanceMarketOptionsSpotOptionsArgs(
            instance_interruption_behavior=spot.interruption,
            # A one-time request ends with its instance: nothing is left to launch more.
            spot_instance_type="one-time",
            max_price=spot.max_price,
        ),
    )
