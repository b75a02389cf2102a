"""The resume, suspend and reconcile programs against moto's EC2 with real boto3 clients:
the launch templates are the ones the program declares, capacity errors are injected."""

import base64
import importlib
import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from moto import mock_aws

from tests.burst.moto_ec2 import AwsWorld, FakeSlurm, no_capacity_for, one_request_at_a_time

resume = importlib.import_module("resume")
suspend = importlib.import_module("suspend")
reconcile = importlib.import_module("reconcile")
burst_common = importlib.import_module("burst_common")


@pytest.fixture
def world(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("MOTO_EC2_ENABLE_INSTANCE_TYPE_VALIDATION", "true")
    with mock_aws(), one_request_at_a_time():
        made = AwsWorld(tmp_path)
        monkeypatch.setenv(burst_common.CONFIG_ENV, str(made.config_file))
        yield made


def run_resume(world, hostlist: str, slurm: FakeSlurm, tmp_path=None) -> None:
    jobs = {"all_nodes_resume": hostlist, "jobs": [{"job_id": 7, "nodes_alloc": hostlist}]}
    resume_file = world.config_file.with_name("resume.json")
    resume_file.write_text(json.dumps(jobs))
    os.environ["SLURM_RESUME_FILE"] = str(resume_file)
    try:
        assert resume.main(["resume", hostlist], slurm=slurm, ec2=burst_common.ec2_client(world.config)) == 0
    finally:
        del os.environ["SLURM_RESUME_FILE"]


def test_resume_starts_one_instance_per_node_named_tagged_on_the_first_type_and_subnet(world):
    slurm = FakeSlurm()
    run_resume(world, "burst-[1-2]", slurm)
    instances = world.live()
    assert sorted(burst_common.tag(i, "gpucluster:node") for i in instances) == ["burst-1", "burst-2"]
    for instance in instances:
        node = burst_common.tag(instance, "gpucluster:node")
        assert instance["InstanceType"] == "g5.xlarge" and instance["SubnetId"] == world.subnets[0]
        assert burst_common.tag(instance, "gpucluster:burst") == "burst"
        user_data = world.user_data_of(instance["InstanceId"])
        assert f"NODE_NAME={node}\n" in user_data and "@NODE_NAME@" not in user_data
        assert instance["ImageId"] == "ami-0a1b2c3d4e5f67890"
    assert slurm.updates == []  # nothing marked down
    log = (world.config_file.parent / "log").read_text()
    assert '"job_id": 7' in log and "burst-1: launched i-" in log


def test_resume_sends_an_idempotency_token_and_never_waits(world, monkeypatch):
    calls = []
    ec2 = burst_common.ec2_client(world.config)
    original = ec2.create_fleet
    monkeypatch.setattr(ec2, "create_fleet", lambda **kw: calls.append(kw) or original(**kw))
    waits = []
    monkeypatch.setattr(ec2, "get_waiter", lambda name: waits.append(name))
    os.environ["SLURM_RESUME_FILE"] = str(world.config_file)  # any readable file
    try:
        resume.main(["resume", "burst-3"], slurm=FakeSlurm(), ec2=ec2)
    finally:
        del os.environ["SLURM_RESUME_FILE"]
    (call,) = calls
    assert call["Type"] == "instant" and call["ClientToken"].startswith("gpu-")
    assert call["TargetCapacitySpecification"]["TotalTargetCapacity"] == 1
    overrides = [o for c in call["LaunchTemplateConfigs"] for o in c["Overrides"]]
    assert [o["Priority"] for o in overrides] == [0.0, 1.0, 2.0, 3.0]  # types x subnets, in order
    assert waits == []


def test_the_idempotency_token_keeps_the_time_with_the_longest_names():
    """N10: `cluster-node-time` was cut to 64 characters: with a long partition name the time
    was lost, and every later resume of the node replayed its first fleet."""
    node = "p" * 63 + "-1000"
    first, later = (
        resume.client_token("abcdefghij", node, 1700000000),
        resume.client_token("abcdefghij", node, 1700000600),
    )
    assert len(first) <= 64 and len(later) <= 64 and first != later
    assert first.endswith("-1700000000") and later.endswith("-1700000600")
    assert resume.client_token("gpu", "burst-1", 5) != resume.client_token("gpu", "burst-2", 5)


def test_a_capacity_error_on_the_first_type_launches_the_second_and_skips_the_first(world):
    slurm = FakeSlurm()
    with no_capacity_for("g5.xlarge"):
        run_resume(world, "burst-1", slurm)
    (instance,) = world.live()
    assert instance["InstanceType"] == "g4dn.xlarge" and slurm.updates == []
    assert "g5.xlarge" in burst_common.skipped_types(world.config)
    # The next launch does not ask for the skipped type at all.
    run_resume(world, "burst-2", slurm)
    assert {i["InstanceType"] for i in world.live()} == {"g4dn.xlarge"}


def test_capacity_errors_on_every_type_mark_the_node_down_with_the_error_and_leave_no_instance(world):
    slurm = FakeSlurm()
    with no_capacity_for("g5.xlarge", "g4dn.xlarge"):
        run_resume(world, "burst-1", slurm)
    assert world.live() == []
    ((nodes, settings),) = slurm.updates
    assert nodes == ["burst-1"] and settings["state"] == "down"
    assert settings["reason"].startswith("burst: (Code:InsufficientInstanceCapacity)")
    # While both are skipped, the next try asks EC2 nothing and says when it tries again.
    run_resume(world, "burst-2", slurm)
    assert slurm.updates[-1][1]["reason"].startswith("burst: no capacity for g5.xlarge, g4dn.xlarge; next try")
    assert world.live() == []


def test_suspend_terminates_by_tag_and_returns_the_node_to_the_pool(world):
    slurm = FakeSlurm()
    run_resume(world, "burst-[1-2]", slurm)
    ec2 = burst_common.ec2_client(world.config)
    assert suspend.main(["suspend", "burst-1"], slurm=slurm, ec2=ec2) == 0
    assert [burst_common.tag(i, "gpucluster:node") for i in world.live()] == ["burst-2"]
    assert slurm.updates[-1] == (["burst-1"], {"state": "resume"})
    # ResumeFailProgram: terminated, the node left DOWN for the reconciler.
    assert suspend.main(["resume-fail", "--failed", "burst-2"], slurm=slurm, ec2=ec2) == 0
    assert world.live() == [] and slurm.updates[-1] == (["burst-1"], {"state": "resume"})


def _orphan(world, node: str | None, burst: bool = True) -> str:
    tags = (
        [{"Key": "gpucluster:cluster", "Value": "gpu"}]
        + ([{"Key": "gpucluster:burst", "Value": "burst"}] if burst else [])
        + ([{"Key": "gpucluster:node", "Value": node}] if node else [])
    )
    made = world.ec2.run_instances(
        ImageId="ami-0a1b2c3d4e5f67890",
        InstanceType="g5.xlarge",
        MinCount=1,
        MaxCount=1,
        SubnetId=world.subnets[0],
        TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
    )
    return made["Instances"][0]["InstanceId"]


def _later(seconds: int) -> float:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).timestamp()


def test_the_reconciler_terminates_orphans_after_the_grace_time_only(world):
    down = {"NodeName": "burst-1", "State": "IDLE+CLOUD+POWERED_DOWN"}
    up = {"NodeName": "burst-2", "State": "ALLOCATED+CLOUD", "NodeAddr": "10.90.1.9"}
    slurm = FakeSlurm({"burst-1": down, "burst-2": up})
    orphan, no_node, running = _orphan(world, "burst-1"), _orphan(world, None), _orphan(world, "burst-2")
    ec2 = burst_common.ec2_client(world.config)
    reconcile.main(["reconcile"], slurm=slurm, ec2=ec2, now=_later(60))
    assert len(world.live()) == 3  # within the grace time: a launch may be on its way
    reconcile.main(["reconcile"], slurm=slurm, ec2=ec2, now=_later(world.config["orphan_grace_s"] + 60))
    assert [i["InstanceId"] for i in world.live()] == [running]
    assert orphan and no_node


def _ec2_host(world) -> str:
    """An instance as components/aws/instance.py makes a cluster's EC2 host: the cluster's tags
    (components/aws/site.py:tags), no burst tag, no node tag."""
    tags = {"Name": "gpu-gpu1", "gpucluster:cluster": "gpu", "gpucluster:stack": "prod", "gpucluster:site": "aws"}
    made = world.ec2.run_instances(
        ImageId="ami-0a1b2c3d4e5f67890",
        InstanceType="g5.xlarge",
        MinCount=1,
        MaxCount=1,
        SubnetId=world.subnets[0],
        TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}],
    )
    return made["Instances"][0]["InstanceId"]


def test_the_cluster_s_own_ec2_hosts_are_never_taken_for_burst_instances(world):
    """N1: the hosts carry gpucluster:cluster too; the reconciler, suspend and resume-fail
    select by the burst tag, so a host beside burst nodes (orphans among them) is left alone."""
    host = _ec2_host(world)
    slurm = FakeSlurm({"burst-1": {"NodeName": "burst-1", "State": "IDLE+CLOUD+POWERED_DOWN"}})
    orphan, no_node = _orphan(world, "burst-1"), _orphan(world, None)
    ec2 = burst_common.ec2_client(world.config)
    assert [i["InstanceId"] for i in burst_common.instances_of(ec2, world.config)] == [orphan, no_node]
    reconcile.main(["reconcile"], slurm=slurm, ec2=ec2, now=_later(world.config["orphan_grace_s"] + 3600))
    assert [i["InstanceId"] for i in world.live()] == [host]
    assert suspend.main(["suspend", "burst-[1-4]"], slurm=slurm, ec2=ec2) == 0
    assert [i["InstanceId"] for i in world.live()] == [host]
    assert host not in (world.config_file.parent / "log").read_text()


def test_the_reconciler_returns_nodes_stuck_powering_up_without_an_instance(world):
    stuck = {"NodeName": "burst-3", "State": "MIXED+CLOUD+POWERING_UP"}
    failed = {"NodeName": "burst-4", "State": "DOWN+CLOUD+POWERED_DOWN", "Reason": "ResumeTimeout reached"}
    slurm = FakeSlurm({"burst-3": stuck, "burst-4": failed})
    ec2 = burst_common.ec2_client(world.config)
    # No launch recorded (the state lost): counted from the first run that sees it.
    reconcile.main(["reconcile"], slurm=slurm, ec2=ec2, now=_later(3600))
    assert (["burst-3"], {"state": "power_down_force"}) not in slurm.updates
    reconcile.main(["reconcile"], slurm=slurm, ec2=ec2, now=_later(3600 + world.config["orphan_grace_s"] + 1))
    assert (["burst-3"], {"state": "down", "reason": "burst: instance gone while powering up"}) in slurm.updates
    assert (["burst-3"], {"state": "power_down_force"}) in slurm.updates
    assert (["burst-4"], {"state": "resume"}) in slurm.updates


def test_a_node_whose_boot_failed_stays_down_with_its_reason_until_the_operator_resumes_it(world):
    """The boot sets its node DOWN with `burst boot: ...` while Slurm waits for ResumeTimeout,
    which then replaces the reason (as Slurm 22.05 does): the node is not returned to the pool,
    where the requeued job would resume it on a new instance that fails the same way."""
    ec2 = burst_common.ec2_client(world.config)
    clash = "burst boot: users[] clash with the image's accounts: uid 1000 belongs to admin (exit 1)"
    booting = {"NodeName": "burst-1", "State": "DOWN+CLOUD+NOT_RESPONDING+POWERING_UP"}
    slurm = FakeSlurm({"burst-1": booting | {"Reason": f"{clash} [root@2026-11-28T01:36:29]"}})
    reconcile.main(["reconcile"], slurm=slurm, ec2=ec2, now=_later(60))
    assert slurm.updates == []
    timed_out = {"State": "DOWN+CLOUD+POWERED_DOWN+NOT_RESPONDING", "Reason": "ResumeTimeout reached [root@x]"}
    slurm.node_fields["burst-1"] = booting | timed_out
    reconcile.main(["reconcile"], slurm=slurm, ec2=ec2, now=_later(120))
    assert slurm.updates == [(["burst-1"], {"state": "down", "reason": clash})]
    slurm.node_fields["burst-1"]["Reason"] = f"{clash} [slurm@2026-11-28T01:39:04]"
    reconcile.main(["reconcile"], slurm=slurm, ec2=ec2, now=_later(180))
    assert len(slurm.updates) == 1  # left as it is, no resume
    # The operator resumes it (scontrol update nodename=burst-1 state=resume): watched anew, and a
    # later failed resume without a boot failure goes back to the pool as before.
    slurm.node_fields["burst-1"] = {"NodeName": "burst-1", "State": "IDLE+CLOUD+POWERED_DOWN"}
    reconcile.main(["reconcile"], slurm=slurm, ec2=ec2, now=_later(240))
    slurm.node_fields["burst-1"] = {"NodeName": "burst-1", **timed_out}
    reconcile.main(["reconcile"], slurm=slurm, ec2=ec2, now=_later(300))
    assert slurm.updates[1:] == [(["burst-1"], {"state": "resume"})]


def test_the_reconciler_leaves_nodes_whose_resume_is_still_launching(world, monkeypatch):
    """N5: the reconciler fires while a resume's CreateFleet calls are on their way: the nodes
    are not set DOWN, and the launch the resume then makes belongs to a node still powering up."""
    grace = world.config["orphan_grace_s"]
    powering = {f"burst-{i}": {"NodeName": f"burst-{i}", "State": "MIXED+CLOUD+POWERING_UP"} for i in (1, 2)}
    slurm = FakeSlurm(powering)
    ec2 = burst_common.ec2_client(world.config)
    original = ec2.create_fleet

    def slow_fleet(**request):  # the reconciler's timer fires during the fleet calls
        reconcile.main(["reconcile"], slurm=slurm, ec2=burst_common.ec2_client(world.config), now=_later(grace // 2))
        return original(**request)

    monkeypatch.setattr(ec2, "create_fleet", slow_fleet)
    os.environ["SLURM_RESUME_FILE"] = str(world.config_file)
    try:
        resume.main(["resume", "burst-[1-2]"], slurm=slurm, ec2=ec2)
    finally:
        del os.environ["SLURM_RESUME_FILE"]
    assert slurm.updates == []  # nothing set DOWN, no power_down_force
    assert len(world.live()) == 2
    launches = burst_common.StateFile(world.config, "launches.json").read()
    assert sorted(launches) == ["burst-1", "burst-2"]


def test_launch_records_are_updated_under_a_lock_so_none_is_lost(world):
    """N5: two programs' read-modify-write of launches.json, one inside the other's: both kept."""
    state = burst_common.StateFile(world.config, "launches.json")
    import threading

    inner_done = threading.Event()

    def inner():
        with burst_common.StateFile(world.config, "launches.json").locked() as launches:
            launches["burst-2"] = 2.0
        inner_done.set()

    with state.locked() as launches:
        worker = threading.Thread(target=inner)
        worker.start()
        assert not inner_done.wait(0.5)  # it waits for the lock
        launches["burst-1"] = 1.0
    worker.join(10)
    assert state.read() == {"burst-1": 1.0, "burst-2": 2.0}


def test_capacity_skips_reported_at_once_by_the_resume_threads_are_all_kept(tmp_path):
    """P4: the resume program's 8 threads report capacity errors at nearly the same time (a
    barrier releases them together): no write fails, and no thread's skip is lost."""
    import threading

    for trial in range(25):
        config = {"state_dir": str(tmp_path / str(trial)), "capacity_skip_s": 600}
        Path(config["state_dir"]).mkdir()
        barrier, failures = threading.Barrier(8), []

        def report(index: int, config=config, barrier=barrier, failures=failures) -> None:
            barrier.wait()
            try:
                burst_common.skip_types(config, [f"type-{index}"], now=1000.0)
            except Exception as error:  # noqa: BLE001 - any failure is the finding
                failures.append(repr(error))

        threads = [threading.Thread(target=report, args=(i,)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert failures == [], (trial, failures)
        skipped = burst_common.skipped_types(config, now=1000.0)
        assert sorted(skipped) == [f"type-{i}" for i in range(8)], (trial, skipped)
        assert sorted(p.name for p in Path(config["state_dir"]).iterdir()) == ["skipped.json", "skipped.lock"]


def test_a_skip_that_is_over_is_dropped_and_a_new_one_kept(tmp_path):
    config = {"state_dir": str(tmp_path), "capacity_skip_s": 600}
    burst_common.skip_types(config, ["g5.xlarge"], now=1000.0)
    burst_common.skip_types(config, ["g4dn.xlarge"], now=2000.0)
    assert burst_common.StateFile(config, "skipped.json").read() == {"g4dn.xlarge": 2600.0}


def test_the_launch_templates_keep_imdsv2_the_group_and_encryption_where_moto_fleets_drop_them(world):
    for template_id in world.templates.values():
        data = world.ec2.describe_launch_template_versions(LaunchTemplateId=template_id)["LaunchTemplateVersions"][0]
        data = data["LaunchTemplateData"]
        assert data["MetadataOptions"]["HttpTokens"] == "required"
        assert data["MetadataOptions"]["HttpPutResponseHopLimit"] == 1
        assert data["BlockDeviceMappings"][0]["Ebs"]["Encrypted"] is True
        assert "NODE_NAME=@NODE_NAME@" in base64.b64decode(data["UserData"]).decode()


def test_scontrol_reads_the_controllers_slurm_conf_where_slurmctld_runs_on_a_host(tmp_path):
    fake = tmp_path / "scontrol"
    fake.write_text('#!/bin/sh\necho "$SLURM_CONF $*"\n')
    fake.chmod(0o755)
    slurm = burst_common.Slurm({"scontrol": str(fake), "slurm_conf": "/var/lib/gpucluster/gpu/controller/slurm.conf"})
    assert slurm.hostnames("burst-1") == [
        "/var/lib/gpucluster/gpu/controller/slurm.conf",
        "show",
        "hostnames",
        "burst-1",
    ]


def test_a_spot_partition_launches_spot_capacity(world):
    world.config["partitions"][0]["capacity"] = "spot"
    world.config_file.write_text(json.dumps(world.config))
    run_resume(world, "burst-1", FakeSlurm())
    (instance,) = world.live()
    assert instance.get("InstanceLifecycle") == "spot"
