"""Replacing an EC2 host under mocks: the plan of a replacing change (AMI, login key) deletes
the instance before it makes the new one (which takes over the fixed private address), keeps
the state volume and the Elastic IP, and makes every command of the host run again on the new
machine; an address that survives a stop and start; the state volume and its attachment."""

import copy

import pytest

from tests.harness.command_executor import unwrap
from tests.harness.plan import plan, records
from tests.harness.program_harness import run_program, stack_config

SECRETS = {"awsSshKey": "-----BEGIN OPENSSH PRIVATE KEY-----\nk\n-----END OPENSSH PRIVATE KEY-----\n"}
INSTANCE, VOLUME = "aws:ec2/instance:Instance", "aws:ebs/volume:Volume"
ATTACHMENT, EIP = "aws:ec2/volumeAttachment:VolumeAttachment", "aws:ec2/eip:Eip"
ASSOCIATION, LOCAL, REMOTE = "aws:ec2/eipAssociation:EipAssociation", "command:local:Command", "command:remote:Command"
# Inputs the providers replace on (ForceNew in terraform-provider-aws; pulumi-command's triggers).
# userData replaces because the instance sets user_data_replace_on_change.
REPLACE_ON = {
    INSTANCE: ("ami", "subnetId", "keyName", "privateIp", "associatePublicIpAddress", "placementGroup",
               "instanceMarketOptions", "availabilityZone", "userData"),
    VOLUME: ("availabilityZone", "encrypted", "kmsKeyId", "snapshotId"),
    ATTACHMENT: ("deviceName", "instanceId", "volumeId"),
    ASSOCIATION: ("allocationId", "instanceId", "networkInterfaceId"),
    EIP: ("domain", "address"),
    LOCAL: ("triggers",),
}  # fmt: skip


def ec2(change=None):
    config = copy.deepcopy(stack_config("ec2"))
    if change:
        change(config["cluster"])
    return run_program(config, stack="ec2", secrets=SECRETS)


def _holds(value, ids: set[str]) -> bool:
    if isinstance(value, dict):
        return any(_holds(v, ids) for v in value.values())
    if isinstance(value, list):
        return any(_holds(v, ids) for v in value)
    return isinstance(value, str) and value in ids


def replaced(old, new) -> set[str]:
    """Names of the resources the engine replaces: a changed input its provider replaces on,
    then, to a fixed point, every resource whose replace-on input holds the id of a replaced
    one (that id is new: the engine replaces such dependents along, deleting them first)."""
    names = {r["urn"]: r["name"] for r in records(new)}
    types = {r.name: r.type for r in new.resources}
    out = set()
    for step in plan(records(old), records(new)):
        if step.action == "replace" or set(step.changed) & set(REPLACE_ON.get(types.get(names.get(step.urn)), ())):
            out.add(names[step.urn])
    while True:
        ids = {f"{name}-id" for name in out}  # the mocks' id of a resource
        more = {
            r.name
            for r in new.resources
            if r.custom and r.name not in out and any(_holds(r.inputs.get(k), ids) for k in REPLACE_ON.get(r.type, ()))
        }
        if not more:
            return out
        out |= more


@pytest.fixture(scope="module")
def before():
    return ec2()


@pytest.mark.parametrize(
    "change",
    [
        lambda c: c["aws"].update(ami="ami-0fedcba9876543210"),  # the documented AMI bump
        lambda c: c["aws"].update(  # a new login key: in the user data, so a new instance
            ssh_public_key="ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBm0Rn0YmGn2KF5Zj9J5lI2qOQX6f3tH6tq6mFJ3qHzK ops@site"
        ),
    ],
    ids=["ami", "login-key"],
)
def test_a_replacing_change_deletes_the_instance_first_and_keeps_the_volume_and_address(before, change):
    after = ec2(change)
    gone = replaced(before, after)
    for host in ("cloud1", "cloud2"):
        prefix = f"cloud-{host}-ec2"
        # The new instance takes over the fixed private address: the old one is deleted first.
        instance = after.by_name(f"{prefix}-instance")
        assert instance.delete_before_replace and instance.inputs["privateIp"] in ("10.80.1.11", "10.80.1.12")
        # Along with it: the attachment, the address association and the host key read from its console.
        assert {
            f"{prefix}-{part}" for part in ("instance", "state-attachment", "address-association", "host-key")
        } <= gone
        # Kept: the state volume and the Elastic IP (their inputs hold nothing of the instance).
        assert {f"{prefix}-state", f"{prefix}-address", f"{prefix}-route"}.isdisjoint(gone)
        for kept in (f"{prefix}-state", f"{prefix}-address"):
            assert not after.depends_on(kept, instance.name), kept
        assert after.by_name(f"{prefix}-state").retain_on_delete  # nor deleted by a destroy
        # Every command of the host pins the new instance's host key: each runs its create again.
        reader = f"{prefix}-host-key"
        commands = [r for r in after.of_type(REMOTE) if r.deleted_with == instance.urn]
        assert len(commands) >= 10
        for command in commands:
            assert after.depends_on(command.name, reader), command.name
            assert not set(command.inputs.get("triggers") or []) & {f"{instance.name}-id"}  # updated, not replaced
    assert {r.type for r in after.resources if r.name in gone} == {INSTANCE, ATTACHMENT, ASSOCIATION, LOCAL}


def test_a_change_of_nothing_replaces_nothing(before):
    assert replaced(before, ec2()) == set()


def test_the_state_volume_outlives_the_instance_in_the_subnets_zone(before):
    for host, size in (("cloud1", 100), ("cloud2", 100)):
        volume = before.by_name(f"cloud-{host}-ec2-state")
        inputs = volume.inputs
        assert (inputs["type"], inputs["encrypted"], inputs["size"]) == ("gp3", True, size)
        # The subnet's zone, not the instance's: a replaced instance never moves the volume.
        assert inputs["availabilityZone"] == "us-east-1a" and before.depends_on(volume.name, "cloud-aws-subnet")
        assert inputs["tags"]["gpucluster:cluster"] == "cloud" and inputs["tags"]["Name"] == volume.name
        assert volume.retain_on_delete
        attachment = before.by_name(f"cloud-{host}-ec2-state-attachment").inputs
        assert attachment == {
            "deviceName": "/dev/sdf",
            "volumeId": f"{volume.name}-id",
            "instanceId": f"cloud-{host}-ec2-instance-id",
            "skipDestroy": True,  # the instance's termination detaches it: no detach of a mounted volume
        }
        user_data = unwrap(before.by_name(f"cloud-{host}-ec2-instance").inputs["userData"])
        # Mounted by the volume's id (NVMe names it so): the mocks' id without its dashes.
        assert "nvme-Amazon_Elastic_Block_Store_" + f"{volume.name}-id".replace("-", "") in user_data


def test_in_an_existing_vpc_the_volume_is_made_in_the_subnets_zone():
    existing = {"vpc_id": "vpc-0a1b2c3d", "subnet_id": "subnet-0a1b2c3d", "subnet_cidr": "10.80.1.0/24",
                "route_table_id": "rtb-0a1b2c3d"}  # fmt: skip
    run = ec2(lambda c: c["aws"].update(vpc=existing))
    assert run.by_name("cloud-cloud1-ec2-state").inputs["availabilityZone"] == "us-east-1c"  # the lookup's answer
    assert run.by_name("cloud-cloud1-ec2-instance").inputs["subnetId"] == "subnet-0a1b2c3d"


def test_the_state_volume_size_is_per_host():
    run = ec2(lambda c: c["hosts"][0]["connection"].update(state_volume_gib=500))
    assert run.by_name("cloud-cloud1-ec2-state").inputs["size"] == 500


def test_the_ssh_address_survives_a_stop_and_start(before):
    """A stopped and started instance gets a new public address; an Elastic IP stays."""
    for host in ("cloud1", "cloud2"):
        eip = before.by_name(f"cloud-{host}-ec2-address")
        assert eip.inputs["domain"] == "vpc" and eip.inputs["tags"]["gpucluster:cluster"] == "cloud"
        association = before.by_name(f"cloud-{host}-ec2-address-association").inputs
        assert association["instanceId"] == f"cloud-{host}-ec2-instance-id"
        assert association["allocationId"].startswith("eipalloc-")
        instance = before.by_name(f"cloud-{host}-ec2-instance")
        for command in before.of_type(REMOTE):
            if command.deleted_with == instance.urn:
                host_address = unwrap(command.inputs["connection"])["host"]
                assert host_address.startswith("203.0.113."), (command.name, host_address)  # the Elastic IP


def test_over_the_private_address_no_elastic_ip():
    run = ec2(lambda c: [h["connection"].update(ssh_via="private") for h in c["hosts"]])
    assert not [r for r in run.resources if r.type in (EIP, ASSOCIATION)]
    ready = unwrap(run.by_name("cloud-cloud1-ssh-ready").inputs["connection"])
    assert ready["host"] == "10.80.1.11"  # fixed: it survives a stop and start too
    assert run.by_name("cloud-cloud1-ec2-instance").inputs["associatePublicIpAddress"] is False
