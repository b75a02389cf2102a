"""EFS as the shared filesystem of an EC2 cluster, under mocks: the file system (kept by
destroy), its mount target in the site's subnet, NFS admitted from the cluster's instances
only, and every host mounting the target's address before its nodes and again at boot."""

import copy

import pytest

from components.composition.stack_config import ConfigError, parse_stack_config
from tests.harness.command_executor import unwrap
from tests.harness.program_harness import run_program, stack_config

SECRETS = {"awsSshKey": "-----BEGIN OPENSSH PRIVATE KEY-----\nk\n-----END OPENSSH PRIVATE KEY-----\n"}


def ec2(shared_fs: dict | None = None) -> dict:
    config = copy.deepcopy(stack_config("ec2"))
    if shared_fs is not None:
        config["cluster"]["shared_fs"] = shared_fs
    return config


@pytest.fixture(scope="module")
def run():
    return run_program(ec2({"kind": "efs"}), stack="ec2", secrets=SECRETS)


def inputs(run, name: str) -> dict:
    return unwrap(run.by_name(name).inputs)


def test_an_encrypted_file_system_kept_by_destroy(run):
    fs = run.by_name("cloud-efs-fs")
    assert fs.type == "aws:efs/fileSystem:FileSystem" and fs.retain_on_delete
    assert inputs(run, "cloud-efs-fs")["encrypted"] is True
    assert inputs(run, "cloud-efs-fs")["performanceMode"] == "generalPurpose"


def test_one_mount_target_in_the_sites_subnet_behind_its_own_group(run):
    target = inputs(run, "cloud-efs-target")
    assert target["subnetId"] == "cloud-aws-subnet-id" and target["securityGroups"] == ["cloud-efs-sg-id"]
    assert target["fileSystemId"] == "cloud-efs-fs-id"


def test_nfs_only_from_the_cluster_instances(run):
    rules = [r for r in run.resources if r.type.startswith("aws:vpc/securityGroupIngressRule") and "efs" in r.name]
    assert [r.name for r in rules] == ["cloud-efs-in-nfs"]
    rule = inputs(run, "cloud-efs-in-nfs")
    assert (rule["ipProtocol"], rule["fromPort"], rule["toPort"]) == ("tcp", 2049, 2049)
    assert rule["referencedSecurityGroupId"] == "cloud-aws-sg-id" and "cidrIpv4" not in rule
    assert rule["securityGroupId"] == "cloud-efs-sg-id"


@pytest.mark.parametrize("host", ["cloud1", "cloud2"])
def test_every_host_mounts_the_target_before_its_nodes_and_at_boot(run, host):
    mount = {
        k.removeprefix("GPUCLUSTER_"): v for k, v in inputs(run, f"cloud-{host}-shared-mount")["environment"].items()
    }
    address = run.by_name("cloud-efs-target")  # the mock gives the target an address
    assert (mount["CLIENT"], mount["EXPORT"], mount["PORT"]) == ("kernel", "/", "2049")
    assert mount["SERVER"].startswith("10.80.1.")
    assert run.depends_on(f"cloud-{host}-shared-mount", address.name)
    node = "c000" if host == "cloud1" else "c001"
    assert run.depends_on(f"cloud-{node}-lxc", f"cloud-{host}-shared-mount")
    state = inputs(run, f"cloud-{host}-boot-unit")["environment"]["GPUCLUSTER_HOST_STATE_TEXT"]
    assert f"SHARED_MOUNT=kernel,{mount['SERVER']},2049,/,/srv/gpucluster/cloud/shared," in state
    # The host's containers get no NFS to the mount target (their traffic leaves as the host's).
    guard = f"gpucluster:cloud:guard:nfs,nfs,{mount['SERVER']},2049,"
    assert mount["NFS_GUARD"].startswith(guard) and not mount["NFS_GUARD"].endswith(",input")
    assert f"NFS_GUARD={mount['NFS_GUARD']}\n" in state
    assert "nfs-common" in inputs(run, f"cloud-{host}-host-packages")["environment"]["GPUCLUSTER_PACKAGES"]


def test_no_server_command_on_any_host(run):
    assert not [r for r in run.resources if r.name.endswith("-nfs-server")]


def test_efs_needs_every_host_on_ec2():
    config = copy.deepcopy(stack_config("twohost"))
    config["cluster"]["shared_fs"] = {"kind": "efs"}
    with pytest.raises(ConfigError) as caught:
        parse_stack_config(config)
    assert "cluster.shared_fs: kind efs needs every host on EC2; hosts[0] 'gpu1' is not" in str(caught.value)


def test_without_shared_fs_no_efs():
    run = run_program(ec2(), stack="ec2", secrets=SECRETS)
    assert not [r for r in run.resources if "efs" in r.type]
