"""The destroy hook against moto's EC2 served on loopback, with the aws CLI a user runs
`pulumi destroy` with: every burst instance of the cluster ends; the cluster's EC2 hosts and other clusters' stay."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import boto3
import pytest
import requests
from moto.server import ThreadedMotoServer

from components.burst.cloud import FILES
from components.common.transport import INTERPRETER, script
from tests.burst.stack import burst_stack
from tests.harness.command_executor import destroy, host_commands
from tests.harness.program_harness import run_program


@pytest.fixture
def endpoint():
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    requests.post(f"http://{host}:{port}/moto-api/reset", timeout=10)  # the backends are the process's
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def _launch(ec2, cluster: str, burst: bool = True) -> str:
    """A burst instance of `cluster`; burst=False: one of its EC2 hosts (the cluster's tags only)."""
    tags = {"gpucluster:cluster": cluster, **({"gpucluster:burst": "burst"} if burst else {"gpucluster:site": "aws"})}
    made = ec2.run_instances(
        ImageId="ami-0a1b2c3d4e5f67890",
        InstanceType="g5.xlarge",
        MinCount=1,
        MaxCount=1,
        TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}],
    )
    return made["Instances"][0]["InstanceId"]


def _states(ec2) -> dict[str, str]:
    pages = ec2.describe_instances()
    return {i["InstanceId"]: i["State"]["Name"] for r in pages["Reservations"] for i in r["Instances"]}


def test_destroy_terminates_every_instance_of_the_cluster_and_waits(endpoint):
    beside = Path(sys.executable).with_name("aws")  # requirements.txt installs it in the venv
    aws = str(beside) if beside.exists() else shutil.which("aws")
    assert aws, "the aws CLI is missing: pip install -r requirements.txt"
    ec2 = boto3.client(
        "ec2", region_name="us-east-1", endpoint_url=endpoint, aws_access_key_id="t", aws_secret_access_key="t"
    )
    ours = [_launch(ec2, "gpu"), _launch(ec2, "gpu")]
    theirs = _launch(ec2, "other")
    host = _launch(ec2, "gpu", burst=False)  # N1: the cluster's own EC2 host stays
    env = {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", "/root"),
        "AWS_CLI": aws,
        "CLUSTER": "gpu",
        "REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "t",
        "AWS_SECRET_ACCESS_KEY": "t",
    }
    done = subprocess.run(
        [*INTERPRETER, script(FILES / "terminate_instances_delete.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    states = _states(ec2)
    assert [states[i] for i in ours] == ["terminated", "terminated"] and states[theirs] == "running"
    assert states[host] == "running"
    assert "terminating the burst instances of gpu" in done.stderr
    # Again, with nothing left: it says so and succeeds (a destroy may be retried).
    again = subprocess.run(
        [*INTERPRETER, script(FILES / "terminate_instances_delete.sh")], env=env, capture_output=True, text=True
    )
    assert again.returncode == 0 and "no burst instance of gpu is running" in again.stderr


def test_destroy_through_the_harness_leaves_no_instance_in_moto(endpoint, monkeypatch):
    """The destroy hook the program declares, run as `pulumi destroy` runs it (the harness),
    with burst nodes running in moto: none is left."""
    beside = Path(sys.executable).with_name("aws")
    monkeypatch.setenv("AWS_CLI", str(beside) if beside.exists() else shutil.which("aws") or "aws")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "t")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "t")
    ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=endpoint)
    nodes = [_launch(ec2, "gpu") for _ in range(3)]
    host = _launch(ec2, "gpu", burst=False)
    config = burst_stack()
    config["cluster"]["burst"]["api_endpoint"] = endpoint
    hook = next(c for c in host_commands(run_program(config, stack="burst")) if c.name.endswith("terminate-instances"))
    assert hook.environment["AWS_ENDPOINT_URL"] == endpoint
    destroy([hook])
    states = _states(ec2)
    assert {states[i] for i in nodes} == {"terminated"} and states[host] == "running"
