"""The program's dependency graph under mocks: shape, parents, edges, scripts and outputs."""

import copy
import json
import re
import subprocess

import pytest

from components.composition.cluster_parts import this_machine_address
from tests.harness.program_harness import ROOT, run_program, stack_config

COMMAND = "command:local:Command"


@pytest.fixture(scope="module")
def run():
    return run_program(stack_config("e2e"), stack="e2e")


def test_component_type_tokens_follow_pkg_module_type(run):
    components = [r for r in run.resources if not r.custom]
    assert components, "no component resources registered"
    for resource in components:
        assert re.fullmatch(r"gpu-cluster:[a-z]+:[A-Z][A-Za-z]+", resource.type), resource.urn


def test_every_resource_has_a_parent_below_the_cluster(run):
    by_urn = run.by_urn
    cluster = run.by_name("e2e")
    assert cluster.type == "gpu-cluster:cluster:GpuCluster"
    for resource in run.resources:
        if resource is cluster:
            continue
        assert resource.parent in by_urn, f"{resource.name} is not parented to a component"
        assert resource.name.startswith("e2e-"), f"{resource.name} is not named after its component"
    for command in run.of_type(COMMAND):
        assert not by_urn[command.parent].custom, f"{command.name}'s parent is not a component"


def test_resource_names_are_unique(run):
    names = [r.name for r in run.resources]
    assert len(names) == len(set(names))


@pytest.mark.parametrize(
    ("resource", "dependency"),
    [
        ("e2e-host-preflight", "e2e-host-stand-in-gpus"),
        ("e2e-host-packages", "e2e-host-preflight"),
        ("e2e-bridges-nat", "e2e-host-preflight"),
        ("e2e-c000-lxc", "e2e-bridges-nat"),
        ("e2e-c000-lxc", "e2e-bridges-cluster"),
        ("e2e-c003-lxc", "e2e-image-rootfs"),
        ("e2e-c001-lxc", "e2e-host-shared-dir"),
        ("e2e-slurm-client", "e2e-slurm-munge-key"),
        ("e2e-slurm-slurmctld", "e2e-slurm-munge-key"),
        ("e2e-slurm-slurmctld", "e2e-c000-lxc"),
        ("e2e-c002-slurm-slurmd", "e2e-slurm-munge-key"),
        ("e2e-c002-slurm-slurmd", "e2e-slurm-slurmctld"),
        ("e2e-c002-slurm-slurmd", "e2e-c002-lxc"),
        ("e2e-health", "e2e-c000-slurm-slurmd"),
        ("e2e-health", "e2e-c003-slurm-slurmd"),
        ("e2e-web-container-lxc", "e2e-bridges-nat"),
        ("e2e-web-service", "e2e-web-container-lxc"),
        ("e2e-fwd-7000-rules", "e2e-web-service"),
        ("e2e-web-container-lxc", "e2e-web-status"),
    ],
)
def test_dependency_edge(run, resource, dependency):
    assert run.depends_on(resource, dependency), f"{resource} does not wait for {dependency}"


def test_the_munge_key_waits_for_no_container_and_the_client_for_its_own(run):
    # The key is made while the containers boot; the host's Slurm client runs in the
    # controller's container (the node image's Slurm), so it waits for that one only.
    containers = [c.name for c in run.of_type(COMMAND) if c.name.endswith("-lxc")]
    assert run.depends_on("e2e-slurm-munge-key", "e2e-host-packages")
    assert not any(run.depends_on("e2e-slurm-munge-key", c) for c in containers)
    client = run.by_name("e2e-slurm-client")
    assert client.inputs["environment"]["CONTAINER"] == "e2e-c000"
    assert run.depends_on("e2e-slurm-client", "e2e-slurm-munge-key")
    assert [c for c in containers if run.depends_on("e2e-slurm-client", c)] == ["e2e-c000-lxc"]


def test_containers_have_no_edges_between_them(run):
    containers = [r.name for r in run.of_type(COMMAND) if r.name.endswith("-lxc")]
    assert len(containers) == 5
    for a in containers:
        for b in containers:
            assert a == b or not run.depends_on(a, b), f"{a} waits for {b}: they could run in parallel"


def test_a_node_does_not_wait_for_other_nodes(run):
    assert not run.depends_on("e2e-c001-slurm-slurmd", "e2e-c000-slurm-slurmd")
    # With jobs in container images (on by default) slurmctld, and so every slurmd, waits for
    # every node's setup (a node of an older image gets Pyxis and the prolog there before any
    # daemon is handed them); without them, a node waits for no other.
    assert run.depends_on("e2e-slurm-slurmctld", "e2e-c002-slurm-containers")
    assert not run.depends_on("e2e-c002-slurm-containers", "e2e-slurm-slurmctld")
    without = copy.deepcopy(stack_config("e2e"))
    without["cluster"]["containers"] = {"enabled": False}
    plain = run_program(without, stack="e2e")
    assert not plain.depends_on("e2e-c001-slurm-slurmd", "e2e-c002-lxc")


def test_commands_run_scripts_with_parameters_in_the_environment(run):
    for command in run.of_type(COMMAND):
        inputs = command.inputs
        assert inputs["interpreter"] == ["/bin/bash", "-c"]
        if command.name == "e2e-scripts":  # the script store's shipping: a few lines of its own
            continue
        for phase in ("create", "update", "delete"):
            script = inputs.get(phase)
            if not script:
                continue
            assert script.startswith("# ---- lib/core.sh ----\n"), f"{command.name} {phase}"
            for key, value in inputs["environment"].items():
                # A config value never appears in the script text: it is passed, not pasted.
                if len(value) > 4 and key not in {"CLUSTER"}:
                    assert value not in script, f"{command.name}: {key}={value!r} pasted into its {phase}"


def test_every_command_that_changes_the_host_can_be_undone(run):
    read_only = {"e2e-host-preflight", "e2e-host-size", "e2e-health"}
    for command in run.of_type(COMMAND):
        if command.name not in read_only:
            assert command.inputs.get("delete"), f"{command.name} has no delete"


def test_scripts_are_valid_bash():
    scripts = sorted((ROOT / "components").rglob("*.sh"))
    assert len(scripts) > 20
    for script in scripts:
        done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, check=False)
        assert done.returncode == 0, f"{script.name}: {done.stderr}"


def test_no_secret_reaches_the_state(run):
    for command in run.of_type(COMMAND):
        environment = command.inputs["environment"]
        assert not any("KEY" in key and key != "MUNGE_KEY_FILE" for key in environment)
    key_file = run.by_name("e2e-slurm-munge-key").inputs["environment"]["MUNGE_KEY_FILE"]
    assert key_file == "/var/lib/gpucluster/e2e/munge.key"


def test_outputs(run):
    outputs = run.outputs
    assert outputs["controller_address"] == "10.43.3.2"
    assert outputs["node_list"] == "c[000-003]"
    assert outputs["nodes"]["c002"] == {
        "container": "e2e-c002",
        "nat_address": "10.43.3.4",
        "cluster_address": "10.43.5.3",
        "gpus": ["/run/gpucluster-e2e-dev/nvidia2"],
    }
    assert outputs["web_url"] == f"http://{this_machine_address()}:7000/"  # not the bridge's 10.43.3.1
    assert outputs["slurm_env"] == 'export PATH="/var/lib/gpucluster/e2e/bin:$PATH"'  # the node image's Slurm client
    assert outputs["node_shells"]["c000"] == "lxc-attach -n e2e-c000"


def test_one_port_value_sets_the_app_and_the_forward(run):
    service = run.by_name("e2e-web-service").inputs["environment"]
    forward = run.by_name("e2e-fwd-7000-rules").inputs["environment"]
    assert service["APP_PORT"] == forward["TARGET_PORT"] == "8080"
    assert forward["TARGET_ADDRESS"] == service["APP_ADDRESS"] == "10.43.3.10"


def test_the_app_container_reads_the_snapshot_read_only_and_holds_no_slurm_access(run):
    lxc = run.by_name("e2e-web-container-lxc").inputs["environment"]
    assert "lxc.mount.entry = /var/lib/gpucluster/e2e/status var/lib/cluster-status none bind,ro," in lxc["LXC_CONFIG"]
    assert "munge.key" not in lxc["LXC_CONFIG"] and "/var/lib/gpucluster/e2e " not in lxc["LXC_CONFIG"]
    status = run.by_name("e2e-web-status").inputs["environment"]
    assert status["STATUS_DIR"] == "/var/lib/gpucluster/e2e/status"
    settings = json.loads(run.by_name("e2e-web-service").inputs["environment"]["APP_SETTINGS"])
    assert settings["listen_address"] == "10.43.3.10" and settings["port"] == 8080
    assert settings["status_file"] == "/var/lib/cluster-status/cluster.json"
    # Nodes get no such mount.
    assert "cluster-status" not in run.by_name("e2e-c001-lxc").inputs["environment"]["LXC_CONFIG"]


def test_adding_a_node_touches_only_that_node_and_the_controller_config():
    config = stack_config("e2e")
    before = run_program(config, stack="e2e")
    grown = copy.deepcopy(config)
    grown["cluster"]["nodes"].append({"name": "c004", "nat_address": "10.43.3.6", "cluster_address": "10.43.5.5"})
    grown["cluster"]["gpu"]["stand_in"]["count"] = 6
    after = run_program(grown, stack="e2e")

    old = {r.name: r.inputs for r in before.of_type(COMMAND)}
    new = {r.name: r.inputs for r in after.of_type(COMMAND)}
    added = set(new) - set(old)
    changed = {name for name in old if new.get(name) != old[name]}
    assert added == {"e2e-c004-lxc", "e2e-c004-slurm-slurmd", "e2e-c004-slurm-containers"}
    # The controller's slurm.conf, the host's client copy, the checks that cover every node,
    # the boot unit's list of containers, the e2e stack's stand-in GPUs: one more, and the host's
    # kernel limits: one more container's share.
    assert changed == {
        "e2e-slurm-slurmctld",
        "e2e-slurm-client",
        "e2e-host-preflight",
        "e2e-host-kernel-limits",
        "e2e-health",
        "e2e-boot-unit",
        "e2e-host-stand-in-gpus",
        # The script store: one more file, the new node's LXC config.
        "e2e-scripts",
    }


def test_controller_on_the_host():
    """placement 'host': slurmctld in a container of its own, a clone of the node image on the
    NAT bridge (its Slurm, no GPUs), which the host's Slurm client runs in too."""
    config = stack_config("e2e")
    config["cluster"]["slurm"]["controller"] = {"placement": "host"}
    run = run_program(config, stack="e2e")
    slurmctld = run.by_name("e2e-slurm-slurmctld")
    env = slurmctld.inputs["environment"]
    assert env["CONTAINER"] == "e2e-slurmctld"
    assert run.depends_on("e2e-slurm-slurmctld", "e2e-slurmctld-container-lxc")
    # Its own container, not a node's: it waits for the nodes' setups only (jobs in container
    # images), never for a node's slurmd.
    assert not run.depends_on("e2e-slurm-slurmctld", "e2e-c000-slurm-slurmd")
    assert run.depends_on("e2e-slurm-slurmctld", "e2e-c000-slurm-containers")
    assert run.by_name("e2e-slurm-client").inputs["environment"]["CONTAINER"] == "e2e-slurmctld"
    container = run.by_name("e2e-slurmctld-container-lxc").inputs["environment"]
    assert container["NAT_ADDRESS"] == "10.43.3.254" == run.outputs["controller_address"]
    assert not re.search(r"nvidia[0-9]", container["DEVICES"])  # no GPU of its own
    assert "SlurmctldHost=slurmctld(10.43.3.254)" in env["SLURM_CONF_TEXT"]


def test_without_web_app_there_is_no_forward():
    config = stack_config("e2e")
    del config["cluster"]["web_app"]
    run = run_program(config, stack="e2e")
    assert not [r for r in run.resources if "web" in r.name or "fwd" in r.name]
    assert run.outputs["web_url"] == ""


def test_what_lives_inside_a_thing_is_replaced_with_it(run):
    """Replacing the image replaces its clones; replacing a container replaces the daemons set
    up inside it (slurmd, the app, slurmctld when it runs there); fixed names and addresses
    mean the old one goes first."""
    by_urn = run.by_urn

    def lives_on(resource: str) -> set[str]:
        return {by_urn[urn].name for urn in run.by_name(resource).replace_with}

    def triggered_by(resource: str) -> set[str]:
        return {by_urn[urn].name for urn in run.by_name(resource).trigger_dependencies}

    # A clone's trigger is read through the image: the engine's delete-before-replace chain of
    # the image reaches the clones (replace_with reaches one link only), and before them
    # slurmctld, whose delete saves the queue from the old container.
    assert triggered_by("e2e-c001-lxc") == {"e2e-image-rootfs"} and lives_on("e2e-c001-lxc") == set()
    assert triggered_by("e2e-web-container-lxc") == {"e2e-image-rootfs"}
    assert run.by_name("e2e-c001-lxc").inputs["triggers"] == run.by_name("e2e-image-rootfs").inputs["triggers"]
    assert lives_on("e2e-c001-slurm-slurmd") == {"e2e-c001-lxc"}
    assert lives_on("e2e-web-service") == {"e2e-web-container-lxc"}
    assert lives_on("e2e-slurm-slurmctld") == {"e2e-c000-lxc", "e2e-image-rootfs"}
    for name in ("e2e-image-rootfs", "e2e-c001-lxc", "e2e-web-container-lxc", "e2e-bridges-nat"):
        assert run.by_name(name).delete_before_replace, name


def test_stand_in_gpus_come_first_so_a_refusal_changes_nothing(run):
    """gpu.stand_in: the stand-ins' create (which refuses a host with an NVIDIA driver) runs
    before every other command, and their delete after every other delete."""
    # Then the preflight, then the host's script store, which every other command runs from:
    # a refused config leaves no file on the host.
    assert not run.by_name("e2e-host-stand-in-gpus").dependencies
    assert run.depends_on("e2e-host-preflight", "e2e-host-stand-in-gpus")
    assert run.depends_on("e2e-scripts", "e2e-host-preflight")
    # The host's size (read only) first too: the preflight checks the nodes' shares of it.
    assert not run.by_name("e2e-host-size").dependencies
    assert run.depends_on("e2e-host-preflight", "e2e-host-size")
    checks = {"e2e-host-stand-in-gpus", "e2e-host-size", "e2e-host-preflight", "e2e-scripts"}
    commands = [c.name for c in run.of_type(COMMAND) if c.name not in checks]
    assert len(commands) > 20
    for name in commands:
        assert run.depends_on(name, "e2e-scripts"), f"{name} does not wait for the script store"


def test_without_stand_ins_there_is_no_stand_in_command():
    run = run_program(stack_config("local"), stack="local")
    assert not [c for c in run.of_type(COMMAND) if "stand-in" in c.name]
