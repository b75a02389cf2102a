"""The stack outputs a user acts on, run or parsed as given: the web URL on an address the host
is reached at (not a bridge), per host of a multi-host stack its address and ssh command, and
the drift check exactly as it runs (./verify.sh's own argument checks, under a stand-in check)."""

import ipaddress
import shlex
import subprocess
from urllib.parse import urlsplit

import pytest

from components.composition.cluster_parts import this_machine_address
from ops import verify
from tests.harness.program_harness import ROOT, run_program, stack_config

SECRETS = {"gpu2SshKey": "placeholder", "awsSshKey": "placeholder"}
CLUSTER_STACKS = ["local", "nogpu", "e2e", "twohost", "ec2"]


@pytest.fixture(scope="module", params=CLUSTER_STACKS)
def stack(request):
    config = stack_config(request.param)
    return request.param, config["cluster"], run_program(config, stack=request.param, secrets=SECRETS).outputs


def bridge_subnets(cluster: dict) -> list:
    networks = [h["network"] for h in cluster.get("hosts", [])] or [cluster["network"]]
    return [ipaddress.ip_interface(n["nat_bridge"]["address"]).network for n in networks] + [
        ipaddress.ip_network(n["cluster_bridge"]["subnet"]) for n in networks
    ]


def test_the_web_url_is_the_hosts_address_and_forwarded_port(stack):
    _, cluster, outputs = stack
    url = urlsplit(outputs["web_url"])
    assert url.scheme == "http" and url.path == "/"
    assert url.port == cluster["web_app"].get("host_port", 7000)
    if "hosts" in cluster:
        web_host = cluster["web_app"]["host"]
        assert url.hostname == outputs["hosts"][web_host]["address"]
    else:  # one local host: this machine, as others reach it (its host name where it has no route)
        assert url.hostname == this_machine_address()
    try:
        address = ipaddress.ip_address(url.hostname)
    except ValueError:
        return
    assert not any(address in subnet for subnet in bridge_subnets(cluster)), outputs["web_url"]


def test_each_verify_command_runs_as_given(stack, monkeypatch):
    _, cluster, outputs = stack
    commands = outputs["verify_command"]
    if "hosts" in cluster:
        assert set(commands) == {h["name"] for h in cluster["hosts"]}
        assert commands == {host: access["verify"] for host, access in outputs["hosts"].items()}
    else:
        commands = {"": commands}
    checked = []
    monkeypatch.setattr(verify, "verify", lambda c, h: checked.append(h) or subprocess.CompletedProcess([], 0, "", ""))
    for command in commands.values():
        script, *args = shlex.split(command)
        assert (ROOT / script).is_file() and script == "./verify.sh"
        assert verify.main(args) == 0, command
    assert checked == [host or None for host in commands]


def test_ssh_and_ec2_hosts_get_an_ssh_command_to_their_address(stack):
    _, cluster, outputs = stack
    for host in cluster.get("hosts", []):
        access = outputs["hosts"][host["name"]]
        kind = host.get("connection", {}).get("kind", "local")
        if kind == "local":
            assert "ssh" not in access
            continue
        argv = shlex.split(access["ssh"])
        assert argv[0] == "ssh" and argv[-1] == f"root@{access['address']}"
        ipaddress.ip_address(access["address"])
        if kind == "ec2":  # under mocks, the instance's public address
            assert access["address"] != host["address"]


def test_verify_names_a_missing_stack_without_a_traceback(capsys):
    assert verify.main(["nosuch"]) == 2
    assert capsys.readouterr().err == "no stack nosuch: stacks/Pulumi.nosuch.yaml does not exist\n"


def test_verify_refuses_a_multi_host_stack_without_its_host(capsys):
    assert verify.main(["twohost"]) == 2
    assert "./verify.sh twohost HOST" in capsys.readouterr().err
