"""Several hosts, one cluster: the `hosts` config, and the graph of the two-host example stack
under mocks (SSH commands, their secrets and bootstrap edges, routes, one Slurm)."""

import copy
import json

import pytest

from components.common.transport import ENV_PREFIX
from components.composition.config import MULTI_HOST_RULES, ClusterConfig
from components.composition.stack_config import ConfigError, parse_stack_config
from tests.harness.command_executor import State, StateEntry, drops_without_running, host_commands, plan, up
from tests.harness.program_harness import run_program, stack_config

LOCAL, REMOTE = "command:local:Command", "command:remote:Command"
# The cluster's munge key, made where `pulumi up` runs (components/common/transport.py generated_secret).
GENERATED_KEY = "head -c 1024 /dev/urandom | base64 -w0"
PRIVATE_KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nnot-a-real-key-but-a-secret\n-----END OPENSSH PRIVATE KEY-----\n"
SECRETS = {"gpu2SshKey": PRIVATE_KEY}
SECRET_SIG = "4dabf18193072939515e22adb298388d"


def twohost() -> dict:
    return copy.deepcopy(stack_config("twohost")["cluster"])


def error_after(change) -> str:
    cluster = twohost()
    change(cluster)
    with pytest.raises(ConfigError) as caught:
        parse_stack_config({"cluster": cluster})
    return str(caught.value)


@pytest.fixture(scope="module")
def run():
    return run_program(stack_config("twohost"), stack="twohost", secrets=SECRETS)


def unwrap(value):
    """An input as the engine sees it, secret wrappers removed."""
    if isinstance(value, dict):
        if SECRET_SIG in value:
            return unwrap(value["value"])
        return {k: unwrap(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unwrap(v) for v in value]
    return value


def commands_of(run, host_prefix: str) -> list:
    return [r for r in run.resources if r.type in (LOCAL, REMOTE) and r.name.startswith(host_prefix)]


# ---- config ----


def test_two_host_stack_validates_and_assigns_gpus_per_host():
    config = parse_stack_config(stack_config("twohost")).cluster
    assert [h.name for h in config.cluster_hosts] == ["gpu1", "gpu2"]
    assert config.hostlist == "c[000-003]"
    # Each host has two GPUs and two nodes: each node gets one GPU of its own host.
    assert config.gpu_assignment() == {
        "c000": ["/dev/nvidia0"],
        "c001": ["/dev/nvidia1"],
        "c002": ["/dev/nvidia0"],
        "c003": ["/dev/nvidia1"],
    }
    view = config.for_host(config.host_named("gpu2"))
    assert [n.name for n in view.nodes] == ["c002", "c003"]
    assert view.network.nat_bridge.address.exploded == "10.47.3.1/24"
    assert view.web_app is None


def test_single_host_stacks_are_one_local_host():
    config = parse_stack_config(stack_config("e2e")).cluster
    assert not config.multi_host
    (host,) = config.cluster_hosts
    assert (host.name, host.is_ssh, host.network) == ("local", False, config.network)
    assert config.for_host(host) is config


MULTI_HOST_CASES = [
    (
        lambda c: c["hosts"][1]["network"]["nat_bridge"].update(address="10.46.3.129/25"),
        "cluster.hosts[1].network.nat_bridge.address: 10.46.3.128/25 overlaps hosts[0].network.nat_bridge.address "
        "10.46.3.0/24; the container subnets of different hosts must be disjoint",
    ),
    (
        lambda c: c["hosts"][1].update(name="gpu1"),
        "cluster.hosts[].name: 'gpu1' is used more than once",
    ),
    (
        lambda c: c["nodes"][2].update(host="gpu9"),
        "cluster.nodes[2].host: 'gpu9' is not one of hosts[].name ['gpu1', 'gpu2']",
    ),
    (
        lambda c: c["nodes"][3].pop("host"),
        "cluster.nodes[3].host: required with several hosts (one of ['gpu1', 'gpu2'])",
    ),
    (
        lambda c: c["nodes"][2].update(gpus=3),
        "cluster.nodes[].gpus: the nodes on host 'gpu2' ask for 4 GPUs in all but hosts[1].gpu.devices declares 2",
    ),
    (
        lambda c: c["nodes"][2].update(nat_address="10.46.3.20"),
        "cluster.nodes[2].nat_address: 10.46.3.20 is not a usable address of the NAT bridge subnet 10.47.3.0/24 "
        "of host 'gpu2'",
    ),
    (
        lambda c: c.update(network=copy.deepcopy(c["hosts"][0]["network"])),
        "cluster.network: not allowed with `hosts`; set it per host (hosts[].network)",
    ),
    (
        lambda c: c["hosts"][1].pop("address"),
        "cluster.hosts[1].address: required with several hosts",
    ),
    (
        lambda c: c["hosts"][1]["connection"].update(host_key="ssh-ed25519 not a key"),
        "cluster.hosts[1].connection.ssh.host_key: String should match pattern",
    ),
    (
        lambda c: c["hosts"][0].update(retired=True),
        "cluster.hosts[0].retired: only a host reached over SSH can be retired; 'gpu1' is this machine",
    ),
    (
        lambda c: c["hosts"][1].update(connection={"kind": "local"}),
        "cluster.hosts[1].connection: hosts[0] is already the local host; only one host can be local",
    ),
    (
        lambda c: c.update(accounting={"nat_address": "10.47.3.20", "host": "gpu9"}),
        "cluster.accounting.host: 'gpu9' is not one of hosts[].name ['gpu1', 'gpu2']",
    ),
    (
        lambda c: c.update(accounting={"nat_address": "10.47.3.20"}),
        "cluster.accounting.nat_address: 10.47.3.20 is not a usable address of the NAT bridge subnet 10.46.3.0/24 "
        "of host 'gpu1'",
    ),
    (
        lambda c: c.update(accounting={"nat_address": "10.46.3.20", "host": "gpu2"}),
        "cluster.accounting.nat_address: 10.46.3.20 is not a usable address of the NAT bridge subnet 10.47.3.0/24 "
        "of host 'gpu2'",
    ),
    (
        lambda c: (
            c.update(accounting={"nat_address": "10.47.3.20", "host": "gpu2"}),
            c["hosts"][1].update(retired=True),
        ),
        "cluster.accounting.host: the database's host 'gpu2' (named) is retired; the database needs a live host",
    ),
    (
        # slurmctld's own container sits on its host's NAT bridge (placement 'host').
        lambda c: c["slurm"].update(controller={"placement": "host", "host": "gpu2", "nat_address": "10.46.3.200"}),
        "cluster.slurm.controller.nat_address: 10.46.3.200 is not a usable address of the NAT bridge subnet "
        "10.47.3.0/24 of host 'gpu2'",
    ),
]


@pytest.mark.parametrize(("change", "message"), MULTI_HOST_CASES)
def test_multi_host_rule_message(change, message):
    assert message in error_after(change)


def test_hosts_and_a_single_host_section_do_not_mix():
    cluster = copy.deepcopy(stack_config("e2e")["cluster"])
    cluster["nodes"][0]["host"] = "gpu1"
    with pytest.raises(ConfigError, match=r"nodes\[0\].host: 'gpu1' names a host, but this stack has no `hosts` list"):
        parse_stack_config({"cluster": cluster})


def test_multi_host_rules_include_every_single_host_rule():
    from components.composition.config import CLUSTER_RULES

    assert set(CLUSTER_RULES) < set(MULTI_HOST_RULES)


# ---- graph ----


def test_ssh_host_commands_are_remote_with_secret_key_and_pinned_host_key(run):
    remote = [r for r in run.of_type(REMOTE)]
    local = [r for r in run.of_type(LOCAL)]
    assert remote and local
    assert all(r.name.startswith(("duo-gpu2-", "duo-c002-", "duo-c003-")) for r in remote), [r.name for r in remote]
    assert all(not r.name.startswith(("duo-gpu2-", "duo-c002-", "duo-c003-")) for r in local)
    pinned = twohost()["hosts"][1]["connection"]["host_key"]
    for command in remote:
        assert "connection" in command.secret_paths, f"{command.name}: the connection (with the key) is not secret"
        connection = unwrap(command.inputs["connection"])
        assert connection["privateKey"] == PRIVATE_KEY
        assert connection["hostKey"] == pinned, f"{command.name} does not pin the host key"
        assert (connection["host"], connection["user"], connection["port"]) == ("192.168.10.12", "root", 22)


def test_every_command_of_an_ssh_host_waits_for_its_bootstrap(run):
    # The bootstrap: sshd answers, the script store's folder and files (they need no
    # parameter), then the drop-in accepting the parameters, run from the store.
    bootstrap = {"duo-gpu2-ssh-ready", "duo-gpu2-scripts-dir", "duo-gpu2-sshd-accept-env"}
    assert run.depends_on("duo-gpu2-scripts-dir", "duo-gpu2-ssh-ready")
    assert run.depends_on("duo-gpu2-scripts", "duo-gpu2-scripts-dir")
    assert run.depends_on("duo-gpu2-sshd-accept-env", "duo-gpu2-scripts")
    for command in run.of_type(REMOTE):
        if command.name in bootstrap:
            continue
        for step in bootstrap:
            assert run.depends_on(command.name, step), f"{command.name} does not wait for {step}"
    # The bootstrap has no parameters: sshd would drop them before the drop-in exists.
    for name in bootstrap:
        assert not run.by_name(name).inputs.get("environment")
    assert "AcceptEnv GPUCLUSTER_*" in run.by_name("duo-gpu2-sshd-accept-env").inputs["create"]
    # Waiting for sshd dials until it answers, but not forever: the provider retries a host key
    # mismatch or a refused login like a refused connection, and `up` must end with that error.
    poll = unwrap(run.by_name("duo-gpu2-ssh-ready").inputs["connection"])
    assert 0 < poll["dialErrorLimit"] * (5 + poll["perDialTimeout"]) <= 20 * 60, poll
    # The local host's commands do not wait for another host's bootstrap.
    assert not run.depends_on("duo-c000-lxc", "duo-gpu2-sshd-accept-env")


def test_ssh_parameters_are_named_readable_environment_under_one_prefix(run):
    for command in run.of_type(REMOTE):
        environment = command.inputs.get("environment") or {}
        assert all(key.startswith(ENV_PREFIX) for key in environment), command.name
        assert "environment" not in command.secret_paths
    lxc = run.by_name("duo-c002-lxc").inputs["environment"]
    assert lxc["GPUCLUSTER_CONTAINER"] == "duo-c002"
    assert "lxc.net.0.link = duobr0" in lxc["GPUCLUSTER_LXC_CONFIG"]
    for command in run.of_type(LOCAL):
        assert not any(key.startswith(ENV_PREFIX) for key in command.inputs.get("environment") or {})


def test_no_secret_in_any_readable_input(run):
    key = run.by_name("duo-munge-key")
    assert key.inputs["create"] == GENERATED_KEY
    assert key.inputs["logging"] == "none", "the generated key must never reach the engine's log"
    for resource in run.resources:
        readable = {k: v for k, v in resource.inputs.items() if k not in resource.secret_paths}
        text = json.dumps(readable)
        assert "PRIVATE KEY" not in text, f"{resource.name} shows the private key"
        assert readable.get("stdin") in (None, "duo"), f"{resource.name} has a readable stdin"
        assert set(resource.secret_paths) <= {"connection", "stdin"}, (resource.name, resource.secret_paths)
    # The munge key travels by stdin to every host, as a secret; nothing else has a stdin.
    with_stdin = sorted(r.name for r in run.resources if "stdin" in r.inputs)
    assert with_stdin == ["duo-gpu1-munge-key", "duo-gpu2-munge-key", "duo-gpu2-sshd-accept-env"]
    for name in with_stdin[:2]:
        assert "stdin" in run.by_name(name).secret_paths
    # The sshd drop-in's one parameter, the cluster's name, by stdin (readable).
    assert run.by_name("duo-gpu2-sshd-accept-env").inputs["stdin"] == "duo"


def test_no_edge_between_the_hosts_containers(run):
    containers = [r.name for r in run.resources if r.type in (LOCAL, REMOTE) and r.name.endswith("-lxc")]
    assert len(containers) == 5
    for a in containers:
        for b in containers:
            assert a == b or not run.depends_on(a, b), f"{a} waits for {b}"


@pytest.mark.parametrize(
    ("resource", "dependency"),
    [
        ("duo-gpu2-bridges-nat", "duo-gpu2-host-preflight"),
        ("duo-c002-lxc", "duo-gpu2-bridges-nat"),
        ("duo-c002-lxc", "duo-gpu2-image-rootfs"),
        ("duo-gpu2-routes", "duo-gpu2-bridges-nat"),
        ("duo-gpu1-routes", "duo-gpu1-bridges-nat"),
        ("duo-slurm-slurmctld", "duo-gpu1-routes"),
        ("duo-slurm-slurmctld", "duo-gpu2-routes"),
        ("duo-slurm-slurmctld", "duo-gpu1-munge-key"),
        ("duo-c002-slurm-slurmd", "duo-gpu2-munge-key"),
        ("duo-c002-slurm-slurmd", "duo-gpu2-slurm-client"),
        ("duo-c002-slurm-slurmd", "duo-slurm-slurmctld"),
        ("duo-health", "duo-c002-slurm-slurmd"),
        ("duo-health", "duo-c000-slurm-slurmd"),
    ],
)
def test_dependency_edge(run, resource, dependency):
    assert run.depends_on(resource, dependency), f"{resource} does not wait for {dependency}"


def test_one_slurm_with_partitions_spanning_hosts(run):
    slurmctld = run.by_name("duo-slurm-slurmctld").inputs["environment"]
    conf = slurmctld["SLURM_CONF_TEXT"]
    assert [line.split()[0] for line in conf.splitlines() if line.startswith("NodeName=")] == [
        f"NodeName=c00{i}" for i in range(4)
    ]
    assert "NodeAddr=10.47.3.2" in conf
    assert "PartitionName=gpu Nodes=c[000-003]" in conf
    assert "SlurmctldHost=c000(10.46.3.2)" in conf
    # Every slurmd points at the one controller, whatever its host.
    for node in ("c000", "c002"):
        environment = {
            k.removeprefix(ENV_PREFIX): v
            for k, v in run.by_name(f"duo-{node}-slurm-slurmd").inputs["environment"].items()
        }
        assert environment["CONF_SERVER"] == "10.46.3.2"
    # gpu2's client copy names its own host's munge socket; the controller's config, the cluster's.
    client = run.by_name("duo-gpu2-slurm-client").inputs["environment"]["GPUCLUSTER_SLURM_CONF_TEXT"]
    assert "AuthInfo=socket=/run/gpucluster-duo/munge.socket" in conf
    assert client.replace("AuthInfo=socket=/run/gpucluster-duo/munge.socket", "") == conf.replace(
        "AuthInfo=socket=/run/gpucluster-duo/munge.socket", ""
    )


def test_routes_lead_to_the_other_host_via_its_address(run):
    gpu1 = run.by_name("duo-gpu1-routes").inputs["environment"]
    gpu2 = run.by_name("duo-gpu2-routes").inputs["environment"]
    assert gpu1["ROUTES"] == "10.47.3.0/24,192.168.10.12"
    assert gpu2["GPUCLUSTER_ROUTES"] == "10.46.3.0/24,192.168.10.11"


def test_retiring_a_dead_host_runs_nothing_then_drops_its_commands_without_running():
    """Two updates, as the README says: `retired: true` alone, then the host and its nodes out.

    The state holds the two-host stack. A remote command's delete would dial the dead host, so
    none may run: the first update must leave every command "same" (nothing runs anywhere)
    while the state learns retain_on_delete; the second deletes gpu2's commands, and the
    engine (DeleteStep) drops each of them from the state without calling the provider.
    """
    live = host_commands(run_program(stack_config("twohost"), stack="twohost", secrets=SECRETS))
    state = State({c.urn: StateEntry(c) for c in live})

    retired = stack_config("twohost")
    retired["cluster"]["hosts"][1]["retired"] = True
    retired["cluster"]["hosts"][1]["install_packages"] = False  # changes gpu2's inputs only: ignored
    commands = host_commands(run_program(retired, stack="twohost", secrets=SECRETS))
    on_gpu2 = {c.urn for c in commands if c.connection}
    assert on_gpu2 and all(c.retain_on_delete and {"create", "environment"} <= c.ignore_changes
                           for c in commands if c.urn in on_gpu2)  # fmt: skip
    assert not any(c.retain_on_delete for c in commands if c.urn not in on_gpu2)
    # The plan first: `up` runs local commands on this machine for real.
    planned = plan(state, commands)
    assert set(planned.values()) == {"same"}, {n: a for n, a in planned.items() if a != "same"}
    timeline, actions = up(state, commands)  # runs no script: every step is "same"
    assert set(actions.values()) == {"same"}
    assert all(step.phase == "same" for step in timeline.steps)
    assert all(state.resources[urn].command.retain_on_delete for urn in on_gpu2)

    gone = stack_config("twohost")
    gone["cluster"]["hosts"].pop(1)
    gone["cluster"]["nodes"] = [n for n in gone["cluster"]["nodes"] if n["host"] == "gpu1"]
    actions = plan(state, host_commands(run_program(gone, stack="twohost", secrets=SECRETS)))
    deleted = {urn for urn, action in actions.items() if action == "delete"}
    assert {urn.rsplit("::", 1)[1] for urn in deleted - on_gpu2} == {"duo-gpu1-routes"}  # runs on gpu1
    assert {urn for urn in deleted if drops_without_running(state.resources[urn].command, deleted)} == on_gpu2


def test_commands_of_a_host_the_program_makes_are_deleted_with_it(tmp_path):
    """An SSH host whose machine is a resource of the stack (EC2): its commands carry
    deleted_with, so deleting the machine does not dial it to delete each command."""
    program = tmp_path / "program.py"
    program.write_text(
        "import pulumi\n"
        "from components.host.boot_unit import FILES\n"
        "from components.composition.stack_config import parse_stack_config\n"
        "from components.common.transport import connect, host_command\n"
        "from tests.harness.program_harness import stack_config\n"
        "host = parse_stack_config(stack_config('twohost')).cluster.host_named('gpu2')\n"
        "machine = pulumi.CustomResource('test:index:Machine', 'machine', {})\n"
        "options = pulumi.ResourceOptions()\n"
        "transport = connect('duo-gpu2', 'duo', host, options, private_key='k', deleted_with=machine)\n"
        "host_command('duo-gpu2-x', create=FILES / 'munge_key_delete.sh', environment={}, transport=transport,\n"
        "             opts=pulumi.ResourceOptions())\n"
    )
    registered = run_program({}, stack="twohost", main=program)
    machine = registered.by_name("machine").urn
    for name in ("duo-gpu2-ssh-ready", "duo-gpu2-sshd-accept-env", "duo-gpu2-x"):
        assert registered.by_name(name).deleted_with == machine, name
        assert not registered.by_name(name).retain_on_delete


def test_node_shells_name_the_host(run):
    assert run.outputs["node_shells"]["c002"] == "lxc-attach -n duo-c002  (on host gpu2)"


def test_single_host_stack_has_no_remote_command_nor_generated_key():
    run = run_program(stack_config("e2e"), stack="e2e")
    generated = [r.name for r in run.of_type(LOCAL) if r.inputs.get("create") == GENERATED_KEY]
    assert not run.of_type(REMOTE) and not generated
    assert (
        ClusterConfig.model_validate(stack_config("e2e")["cluster"]).munge_socket == "/run/gpucluster-e2e/munge.socket"
    )


def test_each_host_brings_back_its_own_part_with_its_routes(run):
    from components.composition.host_state import host_state

    config = parse_stack_config(stack_config("twohost")).cluster
    config = config.model_copy(
        update={"hosts": [config.hosts[0], config.hosts[1].model_copy(update={"lxc_dir": "/var/lib/lxc-gpu2"})]}
    )
    gpu1, gpu2 = (host_state(config, host) for host in config.hosts)
    assert gpu1["ROUTES"] == "10.47.3.0/24,192.168.10.12" and gpu2["ROUTES"] == "10.46.3.0/24,192.168.10.11"
    assert gpu1["NODE_CONTAINERS"] == "duo-c000 duo-c001" and gpu2["NODE_CONTAINERS"] == "duo-c002 duo-c003"
    assert gpu1["CONTROLLER_CONTAINER"] == "duo-c000" and gpu2["CONTROLLER_CONTAINER"] == ""
    assert gpu1["WEB_CONTAINER"] == "duo-web" and gpu2["WEB_CONTAINER"] == "" and gpu2["FORWARDS"] == ""
    assert gpu2["LXC_PATH"] == "/var/lib/lxc-gpu2" and "LXC_PATH" not in gpu1
    # One boot unit per host, each with its host's description, over that host's transport.
    gpu2_unit = run.by_name("duo-gpu2-boot-unit")
    assert gpu2_unit.type == REMOTE
    assert "ROUTES=10.46.3.0/24,192.168.10.11" in gpu2_unit.inputs["environment"]["GPUCLUSTER_HOST_STATE_TEXT"]
    assert run.by_name("duo-gpu1-boot-unit").type == LOCAL


def test_a_one_host_description_has_no_routes_nor_lxc_path():
    from components.composition.host_state import host_state

    state = host_state(parse_stack_config(stack_config("e2e")).cluster)
    assert "ROUTES" not in state and "LXC_PATH" not in state


def test_a_host_with_its_own_lxc_path_passes_it_to_every_command():
    config = stack_config("twohost")
    config["cluster"]["hosts"][1]["lxc_dir"] = "/var/lib/lxc-gpu2"
    run = run_program(config, stack="twohost", secrets=SECRETS)
    for command in run.of_type(REMOTE):
        environment = command.inputs.get("environment") or {}
        if environment:
            assert environment["GPUCLUSTER_LXC_PATH"] == "/var/lib/lxc-gpu2", command.name
    assert all("LXC_PATH" not in (c.inputs.get("environment") or {}) for c in run.of_type(LOCAL))


def test_the_harness_runs_remote_commands_with_their_connection_key_and_stdin(run, tmp_path):
    from tests.harness.command_executor import host_commands
    from tests.harness.ssh_executor import ssh_argv

    commands = {c.name: c for c in host_commands(run)}
    assert commands["duo-c000-lxc"].connection is None
    lxc = commands["duo-c002-lxc"]
    assert lxc.connection["privateKey"] == PRIVATE_KEY and lxc.interpreter == ()
    assert lxc.dependencies >= {commands["duo-gpu2-sshd-accept-env"].urn}
    assert commands["duo-gpu2-munge-key"].stdin and commands["duo-gpu1-munge-key"].stdin
    argv = ssh_argv(lxc.connection, tmp_path, lxc.environment)
    # Exactly the command's variables go as env requests, and only the pinned key is trusted.
    assert sorted(a.removeprefix("SendEnv=") for a in argv if a.startswith("SendEnv=")) == sorted(lxc.environment)
    assert "StrictHostKeyChecking=yes" in argv
    assert (
        tmp_path / "host-known_hosts"
    ).read_text() == f"192.168.10.12 {twohost()['hosts'][1]['connection']['host_key']}\n"


def test_stand_in_gpus_per_host_live_under_its_run_directory():
    cluster = twohost()
    cluster["hosts"][1].update(run_dir="/run/gpu2", gpu={"stand_in": {"count": 2}})
    config = parse_stack_config({"cluster": cluster}).cluster
    assert config.host_named("gpu2").gpu.devices == [
        "/run/gpu2/gpucluster-duo-dev/nvidia0",
        "/run/gpu2/gpucluster-duo-dev/nvidia1",
    ]
    assert config.gpu_assignment()["c003"] == ["/run/gpu2/gpucluster-duo-dev/nvidia1"]
    cluster["hosts"][1]["gpu"]["devices"] = ["/dev/nvidia0"]
    with pytest.raises(
        ConfigError, match=r"hosts\[1\]\.gpu\.devices: cannot be set together with hosts\[1\]\.gpu\.stand_in"
    ):
        parse_stack_config({"cluster": cluster})
    cluster["hosts"][1]["gpu"] = {"stand_in": {"count": 1}}
    with pytest.raises(ConfigError, match=r"but hosts\[1\]\.gpu\.stand_in\.count declares 1; raise hosts\[1\]\.gpu"):
        parse_stack_config({"cluster": cluster})


def test_every_command_of_a_stack_on_one_ssh_host_is_remote():
    from tests.harness.e2e_teardown import PLACEHOLDER_SECRETS, one_ssh_host_config

    run = run_program(one_ssh_host_config(), stack="e2e", secrets=PLACEHOLDER_SECRETS)
    # The only local command makes the munge key where `pulumi up` runs; it touches no host.
    local_commands = [r for r in run.of_type(LOCAL) if r.inputs.get("create") != GENERATED_KEY]
    assert run.of_type(REMOTE) and not local_commands, [r.name for r in local_commands]


# ---- accounting with several hosts ----

USERS = [{"name": "alice", "uid": 2101, "gid": 2101}]


def with_accounting(host: str | None, controller_node: str = "c000") -> dict:
    """The two-host stack with accounting (on `host`, or by default) and one account."""
    config = copy.deepcopy(stack_config("twohost"))
    cluster = config["cluster"]
    subnet = "10.47.3" if (host or ("gpu2" if controller_node in ("c002", "c003") else "gpu1")) == "gpu2" else "10.46.3"
    cluster["users"] = USERS
    cluster["slurm"]["controller"] = {"placement": "container", "node": controller_node}
    cluster["slurm"]["health_check"] = {"interval_s": 30}
    cluster["accounting"] = {
        "nat_address": f"{subnet}.20",
        "accounts": [{"name": "physics", "gpus": 1, "users": ["alice"]}],
        **({"host": host} if host else {}),
    }
    return config


def environment(resource) -> dict:
    return {key.removeprefix(ENV_PREFIX): value for key, value in unwrap(resource.inputs.get("environment")).items()}


DATABASE = [f"duo-slurm-accounting-{part}" for part in ("data", "lxc", "users", "database", "slurmdbd")]


def test_the_accounting_host_must_be_one_of_the_hosts_and_only_with_hosts():
    cluster = copy.deepcopy(stack_config("e2e")["cluster"])
    cluster["accounting"] = {"nat_address": "10.43.3.20", "host": "gpu1"}
    with pytest.raises(ConfigError, match=r"accounting.host: 'gpu1' names a host, but this stack has no `hosts` list"):
        parse_stack_config({"cluster": cluster})


def test_the_database_runs_on_the_host_accounting_names_and_slurmctld_waits_for_it():
    run = run_program(with_accounting("gpu2"), stack="twohost", secrets=SECRETS)
    for name in DATABASE:
        command = run.by_name(name)
        assert command.type == REMOTE, f"{name} does not run on gpu2"
        assert "host:gpu2" in unwrap(command.inputs["triggers"]), f"{name} would not move with accounting.host"
    data = environment(run.by_name("duo-slurm-accounting-data"))
    assert data["DATA_DIR"] == "/var/lib/gpucluster/duo/accounting/mysql"
    assert "lxc.net.0.link = duobr0" in environment(run.by_name("duo-slurm-accounting-lxc"))["LXC_CONFIG"]
    assert "10.47.3.20" in environment(run.by_name("duo-slurm-accounting-lxc"))["LXC_CONFIG"]
    # slurmdbd uses gpu2's munge key and registers the cluster with gpu2's Slurm client.
    for dependency in ("duo-gpu2-munge-key", "duo-gpu2-slurm-client", "duo-gpu2-bridges-nat"):
        assert run.depends_on("duo-slurm-accounting-slurmdbd", dependency)
    assert run.depends_on("duo-slurm-slurmctld", "duo-slurm-accounting-slurmdbd")
    # slurmctld (c000, gpu1) reaches slurmdbd (gpu2) and back over the routes.
    for routes in ("duo-gpu1-routes", "duo-gpu2-routes"):
        assert run.depends_on("duo-slurm-slurmctld", routes)
    # The accounts are applied from the controller's host, after slurmctld registered.
    accounts = run.by_name("duo-accounts-apply")
    assert accounts.type == LOCAL and run.depends_on("duo-accounts-apply", "duo-slurm-slurmctld")
    # The database's container is gpu2's: its preflight and boot unit know it, gpu1's do not.
    assert "duo-db" in environment(run.by_name("duo-gpu2-host-preflight"))["CONTAINERS"].split("\n")
    assert "duo-db" not in environment(run.by_name("duo-gpu1-host-preflight"))["CONTAINERS"].split("\n")
    assert "DB_CONTAINER=duo-db" in environment(run.by_name("duo-gpu2-boot-unit"))["HOST_STATE_TEXT"]
    assert "DB_CONTAINER" not in environment(run.by_name("duo-gpu1-boot-unit"))["HOST_STATE_TEXT"]


def test_every_hosts_slurm_client_runs_in_a_container_of_its_host_with_the_containers_munge():
    config = with_accounting("gpu2")
    config["cluster"]["hosts"][1]["run_dir"] = "/run/duo-gpu2"
    run = run_program(config, stack="twohost", secrets=SECRETS)
    # The client's commands run in a container (the image's Slurm), where the cluster's munge
    # socket has one path on every host; the host's run_dir only names an older release's munged.
    socket = "/run/gpucluster-duo/munge.socket"
    for host, container, old_dir in (
        ("gpu1", "duo-c000", "/run/gpucluster-duo"),
        ("gpu2", "duo-c002", "/run/duo-gpu2/gpucluster-duo"),
    ):
        env = environment(run.by_name(f"duo-{host}-slurm-client"))
        assert (env["CONTAINER"], env["HOST_MUNGE_DIR"]) == (container, old_dir)
        text = env["SLURM_CONF_TEXT"]
        assert "AccountingStorageHost=10.47.3.20\n" in text
        assert "AccountingStorageTRES=gres/gpu\n" in text
        assert f"AccountingStoragePass={socket}\n" in text
        assert f"AuthInfo=socket={socket}\n" in text


@pytest.mark.parametrize(("host", "controller_node", "remote"), [(None, "c000", False), (None, "c002", True)])
def test_the_database_defaults_to_the_controllers_host(host, controller_node, remote):
    run = run_program(with_accounting(host, controller_node), stack="twohost", secrets=SECRETS)
    assert {run.by_name(name).type for name in DATABASE} == {REMOTE if remote else LOCAL}
    assert run.by_name("duo-accounts-apply").type == (REMOTE if remote else LOCAL)
