"""The login node under mocks: its resources and their order, what its setup installs, its
forward, the boot unit's state; and the config's rules on `login` and `users[].ssh_keys`."""

import base64
import copy
import re

import pytest

from components.composition.stack_config import ConfigError, parse_stack_config
from tests.harness.program_harness import run_program, stack_config


def public_key(seed: int, comment: str = " alice@laptop") -> str:
    """A well-formed Ed25519 public key line (no private half exists: nothing logs in with it)."""
    blob = b"\x00\x00\x00\x0bssh-ed25519\x00\x00\x00\x20" + bytes([seed]) * 32
    return "ssh-ed25519 " + base64.b64encode(blob).decode() + comment


def login_config() -> dict:
    config = stack_config("e2e")
    cluster = config["cluster"]
    cluster["users"] = [
        {"name": "alice", "uid": 2101, "gid": 2101, "ssh_keys": [public_key(1), public_key(2, "")]},
        {"name": "bob", "uid": 2102, "gid": 2102, "ssh_keys": [public_key(3)]},
        {"name": "carol", "uid": 2103, "gid": 2103},
    ]
    cluster["login"] = {"nat_address": "10.43.3.30", "host_port": 2222, "allowed_sources": ["10.44.0.0/30"]}
    return config


@pytest.fixture(scope="module")
def run():
    return run_program(login_config(), stack="e2e")


def test_the_login_node_is_a_gpu_less_clone_with_the_people_and_shared_dir(run):
    assert run.by_name("e2e-login").type == "gpu-cluster:slurm:LoginNode"
    lxc = run.by_name("e2e-login-container-lxc").inputs["environment"]
    assert lxc["CONTAINER"] == "e2e-login" and lxc["NAT_ADDRESS"] == "10.43.3.30"
    # No GPU (the driver's control device only, as in the web app's and Prometheus's containers).
    assert not re.search(r"nvidia[0-9]", lxc["DEVICES"] + lxc["LXC_CONFIG"])
    assert "/srv/gpucluster/e2e/shared" in lxc["LXC_CONFIG"]
    users = run.by_name("e2e-login-container-users").inputs["environment"]["USERS"]
    assert users.splitlines() == ["alice:2101:2101:alice", "bob:2102:2102:bob", "carol:2103:2103:carol"]


def test_the_setup_installs_munge_slurm_conf_and_key_only_sshd(run):
    env = run.by_name("e2e-login-setup").inputs["environment"]
    # The cluster's slurm.conf, the same text slurmctld reads: a change updates the login node.
    assert env["SLURM_CONF_TEXT"] == run.by_name("e2e-slurm-slurmctld").inputs["environment"]["SLURM_CONF_TEXT"]
    assert env["MUNGE_KEY_FILE"] == "/var/lib/gpucluster/e2e/munge.key"
    assert env["MUNGE_SOCKET"] == "/run/gpucluster-e2e/munge.socket"
    assert env["SHARED_DIR"] == "/srv/gpucluster/e2e/shared"
    sshd = env["SSHD_CONFIG"].splitlines()
    for line in ("PasswordAuthentication no", "KbdInteractiveAuthentication no", "PermitRootLogin no"):
        assert line in sshd
    assert "AllowUsers alice bob" in sshd  # carol has no key
    assert env["PEOPLE"].splitlines() == [
        "alice:2101:2101:alice",
        " " + public_key(1),
        " " + public_key(2, ""),
        "bob:2102:2102:bob",
        " " + public_key(3),
        "carol:2103:2103:carol",
    ]
    # Set up again in a new clone; after slurmctld and the people.
    setup = run.by_name("e2e-login-setup")
    assert run.by_name("e2e-login-container-lxc").urn in setup.replace_with
    assert run.depends_on("e2e-login-setup", "e2e-slurm-slurmctld")
    assert run.depends_on("e2e-login-setup", "e2e-login-container-users")


def test_its_ssh_is_forwarded_with_the_allowed_sources(run):
    rules = run.by_name("e2e-fwd-2222-rules").inputs["environment"]
    assert (rules["TARGET_ADDRESS"], rules["TARGET_PORT"], rules["SOURCES"]) == ("10.43.3.30", "22", "10.44.0.0/30")
    assert run.depends_on("e2e-fwd-2222-rules", "e2e-login-setup")
    assert run.outputs["login_ssh"].startswith("ssh -p 2222 <person>@")


def test_the_host_knows_it_preflight_and_boot(run):
    preflight = [r for r in run.resources if r.name == "e2e-host-preflight"]
    assert preflight and "e2e-login" in preflight[0].inputs["environment"]["CONTAINERS"].split()
    assert run.depends_on("e2e-boot-unit", "e2e-login-setup")
    state = run.by_name("e2e-boot-unit").inputs["environment"]["HOST_STATE_TEXT"]
    assert "LOGIN_CONTAINER=e2e-login\n" in state and ",2222,10.43.3.30,22,10.44.0.0/30" in state


def test_without_login_the_graph_has_none_of_it():
    run = run_program(stack_config("e2e"), stack="e2e")
    assert not [r.name for r in run.resources if "login" in r.name]
    assert "login_ssh" not in run.outputs


def error_of(change) -> str:
    config = login_config()
    change(config["cluster"])
    with pytest.raises(ConfigError) as caught:
        parse_stack_config({"cluster": config["cluster"]})
    return str(caught.value)


def test_a_key_that_is_not_a_key_is_named():
    def broken(cluster):
        cluster["users"][0]["ssh_keys"] = ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAEB"]

    assert "users.0.ssh_keys.0" in error_of(broken) or "users[0].ssh_keys[0]" in error_of(broken)
    assert "is not a 32-byte Ed25519 key" in error_of(broken) or "cut short" in error_of(broken)

    def with_options(cluster):
        cluster["users"][0]["ssh_keys"] = ['command="sh" ' + public_key(1)]

    assert "ssh_keys" in error_of(with_options)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda c: c["login"].update(nat_address="10.43.4.30"), "login.nat_address: 10.43.4.30 is not a usable"),
        (lambda c: c["login"].update(nat_address="10.43.3.2"), "10.43.3.2 is assigned more than once"),
        (lambda c: c["login"].update(host_port=7000), "host port 7000 is forwarded more than once"),
        (lambda c: c["login"].update(host_port=22), "login.host_port: 22 is a well-known port"),
        (lambda c: c["login"].update(host_port=6817), "login.host_port: 6817 is Slurm's own port"),
        (lambda c: c["login"].update(name="c001"), "'c001' is used more than once"),
        (lambda c: c["login"].update(name="image"), "login.name: 'image' would be the container"),
        (lambda c: [u.pop("ssh_keys", None) for u in c["users"]], "login: no person of users[] has ssh_keys"),
    ],
)
def test_login_fields_are_checked(change, message):
    assert message in error_of(change)


def test_login_host_is_required_with_several_hosts():
    config = copy.deepcopy(stack_config("twohost"))
    config["cluster"]["users"] = [{"name": "alice", "uid": 2101, "gid": 2101, "ssh_keys": [public_key(1)]}]
    nat = config["cluster"]["hosts"][0]["network"]["nat_bridge"]["address"].rsplit(".", 1)[0]
    config["cluster"]["login"] = {"nat_address": f"{nat}.40"}
    with pytest.raises(ConfigError) as caught:
        parse_stack_config({"cluster": config["cluster"]})
    assert "login.host: required with several hosts" in str(caught.value)
