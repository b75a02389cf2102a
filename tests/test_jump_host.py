"""A host reached through a jump host (`connection.bastion`): its host key pinned as the
host's is, the same private key, and the harness dialling it as pulumi-command does
(tests/test_e2e_shared_fs.py proves it against a real jump host)."""

import copy
from pathlib import Path

import pytest

from components.composition.stack_config import ConfigError, parse_stack_config
from tests.harness.command_executor import host_commands
from tests.harness.program_harness import run_program, stack_config
from tests.harness.ssh_executor import ssh_argv

JUMP_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOhkH9ewd0hLV9ydQWDvcoJcUyhhLRKKAD/7JYDJbYtq"
PRIVATE_KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nnot-a-real-key\n-----END OPENSSH PRIVATE KEY-----\n"


def with_bastion(**bastion) -> dict:
    config = copy.deepcopy(stack_config("twohost"))
    config["cluster"]["hosts"][1]["connection"]["bastion"] = {"address": "192.168.10.5", **bastion}
    return config


def test_every_command_of_the_host_goes_through_the_jump_host_with_its_key_pinned():
    run = run_program(with_bastion(port=2022, host_key=JUMP_KEY), stack="twohost", secrets={"gpu2SshKey": PRIVATE_KEY})
    remote = [c for c in host_commands(run) if c.connection]
    assert remote and {c.connection["host"] for c in remote} == {"192.168.10.12"}
    for command in remote:
        proxy = command.connection["proxy"]
        assert (proxy["host"], proxy["port"], proxy["user"], proxy["hostKey"]) == (
            "192.168.10.5",
            2022,
            "root",
            JUMP_KEY,
        )
        assert proxy["privateKey"] == PRIVATE_KEY
        assert "proxy" not in proxy


def test_a_jump_host_without_a_pinned_key_is_refused_naming_the_field():
    with pytest.raises(ConfigError) as caught:
        parse_stack_config(with_bastion())
    assert "cluster.hosts[1].connection.ssh.bastion.host_key: Field required" in str(caught.value)


def test_the_harness_checks_the_jump_hosts_key_and_logs_its_dials_apart(tmp_path):
    connection = {
        "host": "10.0.0.2",
        "hostKey": JUMP_KEY,
        "privateKey": PRIVATE_KEY,
        "proxy": {"host": "10.0.0.6", "port": 2022, "hostKey": JUMP_KEY, "privateKey": PRIVATE_KEY},
    }
    argv = ssh_argv(connection, tmp_path, {})
    (proxy_command,) = [arg.removeprefix("ProxyCommand=") for arg in argv if arg.startswith("ProxyCommand=")]
    assert "StrictHostKeyChecking=yes" in proxy_command and "-W %h:%p 10.0.0.6" in proxy_command
    assert f"-E {tmp_path}/proxy.log" in proxy_command
    assert Path(tmp_path / "proxy-known_hosts").read_text() == f"[10.0.0.6]:2022 {JUMP_KEY}\n"
