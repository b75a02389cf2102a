"""The login node under mocks: its resources and their order, what its setup installs, its
forward, the boot unit's state; and the config's rules on `login` and `users[].ssh_keys`."""

import base64
import copy
import re
from itertools import pairwise

import pytest

from components.composition.stack_config import ConfigError, parse_stack_config
from components.slurm.config import LOGIN_ID_RANGE, LoginConfig
from components.slurm.login import ID_MAP_MAX_LINES, id_map_ranges, login_host_id_base
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
    # No GPU, no control device, no driver file, no CUDA: no GPU work runs there.
    assert not re.search(r"nvidia", lxc["DEVICES"] + lxc["LXC_CONFIG"] + lxc["DRIVER_FILES"])
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
    # Pyxis in its srun and sbatch (jobs in container images, on by default), and the image
    # whose build of it a login node of an older image installs (lib/containers_addon.sh).
    assert "required spank_pyxis.so" in env["PLUGSTACK_CONF_TEXT"] and env["IMAGE"] == "e2e-image"
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


def idmap_lines(lxc_config: str) -> list[tuple[str, int, int, int]]:
    found = re.findall(r"^lxc\.idmap = ([ug]) (\d+) (\d+) (\d+)$", lxc_config, re.MULTILINE)
    return [(kind, int(a), int(b), int(c)) for kind, a, b, c in found]


def host_id(lines, kind: str, container_id: int) -> int:
    for k, first, host, count in lines:
        if k == kind and first <= container_id < first + count:
            return host + container_id - first
    raise AssertionError(f"{kind}id {container_id} is not mapped")


def test_the_login_node_is_unprivileged_and_the_people_keep_their_ids(run):
    """Its root is a host id of no note; each person is the same uid and gid on the host (their
    files in shared_dir have one owner everywhere); every id of the namespace is mapped once."""
    config = run.by_name("e2e-login-container-lxc").inputs["environment"]["LXC_CONFIG"]
    assert "lxc.include = /usr/share/lxc/config/userns.conf" in config
    lines = idmap_lines(config)
    base = login_host_id_base("e2e", LoginConfig(nat_address="10.43.3.30"))
    assert base >= LOGIN_ID_RANGE
    for kind in "ug":
        assert host_id(lines, kind, 0) == base  # root
        assert host_id(lines, kind, 65534) == base + 65534  # nobody
        for person in (2101, 2102, 2103):
            assert host_id(lines, kind, person) == person
        assert host_id(lines, kind, 2104) == base + 2104
        ranges = sorted((first, count) for k, first, _, count in lines if k == kind)
        assert ranges[0][0] == 0 and sum(count for _, count in ranges) == LOGIN_ID_RANGE
        assert all(a + n == b for (a, n), (b, _) in pairwise(ranges))
    # A node stays privileged (Slurm's device containment needs the host's devices controller).
    assert "lxc.idmap" not in run.by_name("e2e-c000-lxc").inputs["environment"]["LXC_CONFIG"]
    # Going from a privileged clone to an unprivileged copy is a new container, never a change in place.
    login_triggers = run.by_name("e2e-login-container-lxc").inputs["triggers"]
    assert login_triggers[-1] == "unprivileged" and "unprivileged" not in run.by_name("e2e-c000-lxc").inputs["triggers"]


def test_the_login_node_has_cpus_and_memory_of_its_own_counted_by_the_preflight(run):
    env = run.by_name("e2e-login-container-lxc").inputs["environment"]
    nodes_cpus = sum(node["cpus"] for node in login_config()["cluster"]["nodes"])
    assert env["CPUSET"] == f"{nodes_cpus},2"  # dealt after the nodes' CPUs
    assert env["MEMORY_MB"] == "2048"
    preflight = run.by_name("e2e-host-preflight").inputs["environment"]
    nodes = [run.by_name(f"e2e-{node['name']}-lxc") for node in login_config()["cluster"]["nodes"]]
    assert int(preflight["NODE_MEMORY_MB"]) == sum(int(n.inputs["environment"]["MEMORY_MB"]) for n in nodes) + 2048
    # The nodes without memory_mb share what the login node leaves of the host.
    without = run_program(stack_config("e2e"), stack="e2e").by_name("e2e-c001-lxc").inputs["environment"]
    assert int(without["MEMORY_MB"]) - int(run.by_name("e2e-c001-lxc").inputs["environment"]["MEMORY_MB"]) == (
        2048 * 2 // 16
    )


def test_the_people_keys_are_root_files_sshd_reads_outside_their_homes(run):
    env = run.by_name("e2e-login-setup").inputs["environment"]
    assert "AuthorizedKeysFile /etc/ssh/authorized_keys/%u" in env["SSHD_CONFIG"].splitlines()
    assert env["AUTHORIZED_KEYS_DIR"] == "/etc/ssh/authorized_keys"


def test_two_clusters_get_two_id_ranges_and_a_site_may_pick_one():
    bases = {login_host_id_base(name, LoginConfig(nat_address="10.43.3.30")) for name in ("e2e", "gpu", "lab")}
    assert len(bases) == 3 and min(bases) >= 1_000_000
    assert login_host_id_base("e2e", LoginConfig(nat_address="10.43.3.30", host_id_base=3_000_000)) == 3_000_000


def test_id_ranges_coalesce_and_the_kernel_limit_is_named():
    assert id_map_ranges({1000, 1001, 1002}, 100_000) == [(0, 100_000, 1000), (1000, 1000, 3), (1003, 101_003, 64533)]
    assert len(id_map_ranges(set(range(1000, 1000 + 2 * 200, 2)), 100_000)) > ID_MAP_MAX_LINES

    def scattered(cluster):
        cluster["users"] += [{"name": f"p{i}", "uid": 3000 + 2 * i, "gid": 3000 + 2 * i} for i in range(200)]

    message = error_of(scattered)
    assert "users[].uid: the login node keeps each person's uid" in message and "more than the kernel's 340" in message


def test_a_login_node_too_small_to_run_is_refused_by_its_field():
    def huge(cluster):
        cluster["login"]["memory_mb"] = 100

    assert "login.memory_mb" in error_of(huge)
