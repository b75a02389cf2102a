"""The cluster's shared filesystem on EC2 (shared_fs: {kind: efs}): an EFS file system, its
mount target in the site's subnet, and a security group admitting NFS from the cluster's
instances only. Every host mounts the mount target's address at its shared_dir."""

import pulumi
import pulumi_aws as aws

from components.aws.config import AwsConfig
from components.aws.site import Ec2Site, tags
from components.sharedfs.config import EfsShare

NFS_PORT = 2049


class EfsFileSystem(pulumi.ComponentResource):
    """`<name>-fs` (kept by destroy: `retain_on_delete`, so no file is ever deleted by the
    program; docs/hosts.md says how to delete it), `<name>-sg` with one ingress rule, TCP 2049
    from the instances' security group, and `<name>-target` in the site's subnet. `address`
    is the mount target's IP address (no DNS needed inside the VPC)."""

    def __init__(
        self,
        name: str,
        config: AwsConfig,
        cluster: str,
        share: EfsShare,
        site: Ec2Site,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("gpu-cluster:aws:EfsFileSystem", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=site.provider)

        def tagged(suffix: str) -> dict[str, str]:
            return tags(f"{name}-{suffix}", cluster, config.site)

        self.file_system = aws.efs.FileSystem(
            f"{name}-fs",
            encrypted=share.encrypted,
            performance_mode=share.performance_mode,
            tags=tagged("fs"),
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(retain_on_delete=True)),
        )
        group = aws.ec2.SecurityGroup(
            f"{name}-sg",
            vpc_id=site.vpc_id,
            description=f"gpu-cluster {cluster}: NFS to the shared file system from the cluster instances only",
            tags=tagged("sg"),
            opts=child,
        )
        aws.vpc.SecurityGroupIngressRule(
            f"{name}-in-nfs",
            security_group_id=group.id,
            referenced_security_group_id=site.security_group_id,
            ip_protocol="tcp",
            from_port=NFS_PORT,
            to_port=NFS_PORT,
            description="NFS from the cluster instances",
            tags=tagged("in-nfs"),
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[group])),
        )
        self.target = aws.efs.MountTarget(
            f"{name}-target",
            file_system_id=self.file_system.id,
            subnet_id=site.subnet_id,
            security_groups=[group.id],
            opts=child,
        )
        self.address = self.target.ip_address
        self.register_outputs({"file_system_id": self.file_system.id, "address": self.address})
