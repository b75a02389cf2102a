"""The resume and suspend programs run as slurmctld runs them: their own files as scripts (the
wrappers' command line), the config file named by the environment, SLURM_RESUME_FILE, scontrol
on the controller, and the EC2 API at the configured endpoint (moto served on loopback) with
the controller's key from its file; a capacity error injected into the served API."""

import json
import os
import subprocess
import sys

import pytest
import requests
from moto.server import ThreadedMotoServer

from tests.burst.moto_ec2 import FILES, AwsWorld, no_capacity_for

FAKE_SCONTROL = """#!/bin/sh
# scontrol as the programs use it: hostnames (one name here), updates recorded.
if [ "$1" = show ] && [ "$2" = hostnames ]; then echo "$3"; exit 0; fi
echo "$*" >> "$(dirname "$0")/updates"
"""


@pytest.fixture
def world(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    requests.post(f"http://{host}:{port}/moto-api/reset", timeout=10)  # the backends are the process's
    try:
        made = AwsWorld(tmp_path, endpoint=f"http://{host}:{port}")
        scontrol = tmp_path / "scontrol"
        scontrol.write_text(FAKE_SCONTROL)
        scontrol.chmod(0o755)
        made.config["scontrol"] = str(scontrol)
        made.config_file.write_text(json.dumps(made.config))
        yield made
    finally:
        server.stop()


def run(world, program: str, *args: str) -> subprocess.CompletedProcess:
    resume_file = world.config_file.with_name("resume.json")
    resume_file.write_text(json.dumps({"all_nodes_resume": args[-1], "jobs": [{"job_id": 11}]}))
    # slurmctld's environment, not the test's: no AWS variables, the program finds its key itself.
    env = {
        "PATH": "/usr/bin:/bin",
        "GPUCLUSTER_BURST_CONFIG": str(world.config_file),
        "SLURM_RESUME_FILE": str(resume_file),
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
    }
    return subprocess.run(
        [sys.executable, str(FILES / program), *args], env=env, capture_output=True, text=True, timeout=120
    )


def test_resume_then_suspend_as_slurmctld_runs_them(world):
    done = run(world, "resume.py", "burst-1")
    assert done.returncode == 0, done.stderr
    (instance,) = world.live()
    assert instance["InstanceType"] == "g5.xlarge"
    assert "NODE_NAME=burst-1\n" in world.user_data_of(instance["InstanceId"])
    done = run(world, "suspend.py", "burst-1")
    assert done.returncode == 0, done.stderr
    assert world.live() == []
    updates = (world.config_file.parent / "updates").read_text()
    assert updates == "update nodename=burst-1 state=resume\n"


def test_a_capacity_error_over_http_falls_back_to_the_next_type(world):
    with no_capacity_for("g5.xlarge"):
        done = run(world, "resume.py", "burst-2")
    assert done.returncode == 0, done.stderr
    (instance,) = world.live()
    assert instance["InstanceType"] == "g4dn.xlarge"
    log = (world.config_file.parent / "log").read_text()
    assert "no capacity for g5.xlarge" in log and "burst-2: launched" in log
