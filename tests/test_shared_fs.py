"""The shared filesystem (shared_fs): its config and errors, the server's export (only the
cluster's hosts, from privileged ports, root squashed), and the graph under mocks: the server
before every mount, every mount before the nodes that bind it, the mount in the boot path."""

import copy
import subprocess
from pathlib import Path

import pytest

from components.common.transport import INTERPRETER, helpers
from components.composition.host_state import host_state
from components.composition.stack_config import ConfigError, parse_stack_config
from components.sharedfs.shared_fs import export_clients, render_ganesha_conf
from tests.harness.command_executor import State, StateEntry, host_commands, plan
from tests.harness.program_harness import run_program, stack_config

SECRETS = {"gpu2SshKey": "-----BEGIN OPENSSH PRIVATE KEY-----\nx\n-----END OPENSSH PRIVATE KEY-----\n"}
SERVED = {"kind": "served", "directory": "/srv/gpucluster/duo/export"}


def twohost(shared_fs=None) -> dict:
    config = copy.deepcopy(stack_config("twohost"))
    if shared_fs is not None:
        config["cluster"]["shared_fs"] = copy.deepcopy(shared_fs)
    return config


def parsed(shared_fs=SERVED):
    return parse_stack_config(twohost(shared_fs)).cluster


def error_of(config: dict) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_stack_config(config)
    return str(caught.value)


@pytest.fixture(scope="module")
def run():
    return run_program(twohost(SERVED), stack="twohost", secrets=SECRETS)


def env(run, name: str) -> dict:
    environment = run.by_name(name).inputs["environment"]
    return {key.removeprefix("GPUCLUSTER_"): value for key, value in environment.items()}


# ---- config ----


def test_served_by_the_controllers_host_by_default():
    config = parsed()
    assert config.shared_fs.root_squash is True and config.shared_fs.client == "kernel"
    assert config.shared_fs.port == 2049


def mutate(change) -> dict:
    config = twohost(SERVED)
    change(config["cluster"])
    return config


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda c: c["hosts"][1].update(shared_dir="/srv/other"), "hosts[1].shared_dir: /srv/other differs"),
        (lambda c: c["shared_fs"].update(host="gpu9"), "shared_fs.host: 'gpu9' is not one of hosts[].name"),
        (lambda c: c["hosts"][0].pop("address"), "shared_fs (served by the controller's host 'gpu1'): host 'gpu1' has"),
        (
            lambda c: c["shared_fs"].update(directory="/srv/gpucluster/duo/shared/data"),
            "shared_fs.directory: /srv/gpucluster/duo/shared/data and the shared_dir /srv/gpucluster/duo/shared of",
        ),
        (lambda c: c["shared_fs"].update(kind="ceph"), "shared_fs"),
        (lambda c: c["shared_fs"].update(root_squash="no"), "shared_fs.served.root_squash"),
        (lambda c: c["shared_fs"].update(client="fuse"), "shared_fs.served.client"),
        (lambda c: c.update(shared_fs={"kind": "nfs", "server": "10.1", "path": "/x"}), "shared_fs.nfs.server"),
    ],
)
def test_bad_shared_fs_names_the_field(change, message):
    assert message in error_of(mutate(change))


SYSTEM_PLACES = ["/etc", "/etc/exports.d", "/root", "/root/data", "/home", "/home/alice", "/var/lib", "/usr", "/srv"]


@pytest.mark.parametrize("directory", [*SYSTEM_PLACES, "/tmp/share", "/boot"])
def test_a_system_directory_is_never_served(directory):
    """N7: the served directory is exported read-write to every host and bound into every node."""
    message = error_of(mutate(lambda c: c["shared_fs"].update(directory=directory)))
    assert f"shared_fs.directory: {directory} is" in message


def test_a_one_host_stack_without_burst_is_told_shared_fs_needs_hosts_or_burst():
    config = copy.deepcopy(stack_config("e2e"))
    for shared_fs in (
        {"kind": "nfs", "server": "nfs.example.org", "path": "/export/e2e"},
        {"kind": "served", "directory": "/srv/gpucluster/e2e/export"},
    ):
        config["cluster"]["shared_fs"] = shared_fs
        assert (
            "shared_fs: needs `hosts` or `burst` (a one-host stack's shared_dir is on its only host already; "
            "with a burst partition it is served to the burst nodes)"
        ) in error_of(config)


# ---- one host with a burst partition: the classic hybrid (one GPU box bursting to EC2) ----

ONE_HOST_SERVED = {"kind": "served", "directory": "/srv/gpucluster/gpu/export"}


def one_host_burst(shared_fs=ONE_HOST_SERVED) -> dict:
    """The local stack (one host, NAT bridge 10.42.3.1/24) with a burst partition whose VPN
    reaches 10.42.0.0/16, and a shared filesystem."""
    from tests.burst.stack import burst_stack

    config = burst_stack()
    config["cluster"]["shared_fs"] = copy.deepcopy(shared_fs)
    return config


def test_a_one_host_stack_with_burst_serves_its_export_at_its_nat_bridge_address():
    """The host's shared_dir is not on its burst nodes: the host serves it at its NAT bridge
    address (inside burst.on_premises_cidrs), mounts it itself and admits the burst subnets."""
    from components.sharedfs.shared_fs import burst_mount, served_address

    config = parse_stack_config(one_host_burst()).cluster
    assert str(served_address(config)) == "10.42.3.1"
    assert export_clients(config) == ["10.42.3.1", "10.90.1.0/24", "10.90.2.0/24"]
    conf = render_ganesha_conf(config)
    assert "Bind_addr = 10.42.3.1;" in conf
    assert "CLIENT { Clients = 10.42.3.1, 10.90.1.0/24, 10.90.2.0/24; Access_Type = RW; }" in conf
    assert burst_mount(config) == "10.42.3.1:2049:/gpucluster-gpu"
    state = host_state(config, config.cluster_hosts[0])
    assert state["NFS_SERVER"] == "/var/lib/gpucluster/gpu/nfs-server,10.42.3.1,2049"
    assert state["SHARED_MOUNT"] == (
        "kernel,10.42.3.1,2049,/gpucluster-gpu,/srv/gpucluster/gpu/shared,/var/lib/gpucluster/gpu"
    )
    assert state["NFS_GUARD"] == "gpucluster:gpu:guard:nfs,nfs,10.42.3.1,2049,10.42.3.0/24+10.42.5.0/24,input"


def test_a_one_host_stack_with_burst_mounts_a_sites_export_too():
    site = {"kind": "nfs", "server": "10.42.7.9", "path": "/export/gpu"}
    config = parse_stack_config(one_host_burst(site)).cluster
    assert host_state(config, config.cluster_hosts[0])["SHARED_MOUNT"].startswith("kernel,10.42.7.9,2049,/export/gpu,")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda fs: fs.update(host="gpu1"), "shared_fs.host: 'gpu1' names a host, but this stack has no `hosts` list"),
        (lambda fs: fs.update(directory="/etc/export"), "shared_fs.directory: /etc/export is"),
        (
            lambda fs: fs.update(directory="/srv/gpucluster/gpu/shared/x"),
            "shared_fs.directory: /srv/gpucluster/gpu/shared/x and the shared_dir /srv/gpucluster/gpu/shared of",
        ),
        (lambda fs: fs.update(port=0), "shared_fs.served.port"),
        (lambda fs: fs.clear() or fs.update(kind="efs"), "burst: shared_fs kind efs is in the EC2 site's VPC"),
        (
            lambda fs: fs.clear() or fs.update(kind="nfs", server="192.168.77.2", path="/x"),
            "burst.on_premises_cidrs: shared_fs.server 192.168.77.2 is in none of them",
        ),
    ],
)
def test_a_one_host_stack_with_burst_still_refuses_a_bad_shared_fs_naming_the_field(change, message):
    shared_fs = copy.deepcopy(ONE_HOST_SERVED)
    change(shared_fs)
    assert message in error_of(one_host_burst(shared_fs))


def test_a_one_host_stack_serving_its_export_makes_bridges_then_server_then_mount_then_containers():
    """The server binds the NAT bridge's address: the bridges come first; every container that
    binds shared_dir (the nodes, the web app) waits for the mount."""
    config = one_host_burst()
    config["cluster"]["metrics"] = {"nat_address": "10.42.3.30"}
    run = run_program(config, stack="local")
    assert run.depends_on("gpu-nfs-server", "gpu-bridges-nat")
    assert run.depends_on("gpu-shared-mount", "gpu-nfs-server")
    assert run.depends_on("gpu-shared-mount", "gpu-host-shared-dir")
    assert not run.depends_on("gpu-bridges-nat", "gpu-shared-mount")
    for container in ("gpu-c000-lxc", "gpu-c003-lxc", "gpu-web-container-lxc", "gpu-metrics-container-lxc"):
        assert run.depends_on(container, "gpu-shared-mount"), container
    assert "nfs-ganesha" in env(run, "gpu-host-packages")["PACKAGES"].split()
    assert env(run, "gpu-nfs-server")["ADDRESS"] == "10.42.3.1"
    assert env(run, "gpu-shared-mount")["SERVER"] == "10.42.3.1"


# ---- the export ----


def test_export_only_to_the_cluster_hosts_from_privileged_ports_root_squashed():
    """N3: no container subnet is a client, and AUTH_SYS is trusted from reserved ports only
    (tests/test_stand_in_nfs_client.py proves both against a real NFS-Ganesha)."""
    config = parsed()
    assert export_clients(config) == ["192.168.10.11", "192.168.10.12"]
    conf = render_ganesha_conf(config)
    assert "Access_Type = None;" in conf  # nobody else
    assert "CLIENT { Clients = 192.168.10.11, 192.168.10.12; Access_Type = RW; }" in conf
    assert "PrivilegedPort = true;" in conf
    assert "Squash = root_squash;" in conf and "Bind_addr = 192.168.10.11;" in conf
    assert "Path = /srv/gpucluster/duo/export;" in conf and "Pseudo = /gpucluster-duo;" in conf
    unsquashed = parse_stack_config(twohost({**SERVED, "root_squash": False})).cluster
    assert "Squash = no_root_squash;" in render_ganesha_conf(unsquashed)


# ---- the graph ----


def test_the_server_runs_on_the_serving_host_and_every_mount_waits_for_it(run):
    server = run.by_name("duo-gpu1-nfs-server")
    assert server.type == "command:local:Command"
    assert env(run, "duo-gpu1-nfs-server")["DIRECTORY"] == "/srv/gpucluster/duo/export"
    for host in ("gpu1", "gpu2"):
        assert run.depends_on(f"duo-{host}-shared-mount", "duo-gpu1-nfs-server")
        assert run.depends_on(f"duo-{host}-shared-mount", f"duo-{host}-host-shared-dir")
    remote = env(run, "duo-gpu2-shared-mount")
    assert run.by_name("duo-gpu2-shared-mount").type == "command:remote:Command"
    assert (remote["SERVER"], remote["EXPORT"], remote["SHARED_DIR"]) == (
        "192.168.10.11", "/gpucluster-duo", "/srv/gpucluster/duo/shared"
    )  # fmt: skip


@pytest.mark.parametrize("node", ["c000", "c002"])
def test_nodes_start_after_their_hosts_mount(run, node):
    host = "gpu1" if node == "c000" else "gpu2"
    assert run.depends_on(f"duo-{node}-lxc", f"duo-{host}-shared-mount")


def test_packages_server_on_the_serving_host_only(run):
    assert "nfs-ganesha" in env(run, "duo-gpu1-host-packages")["PACKAGES"].split()
    gpu2 = env(run, "duo-gpu2-host-packages")["PACKAGES"].split()
    assert "nfs-ganesha" not in gpu2 and "nfs-common" in gpu2


def test_the_boot_path_serves_and_mounts_again():
    config = parsed()
    first, second = (host_state(config, config.host_named(name)) for name in ("gpu1", "gpu2"))
    state_dir = "/var/lib/gpucluster/duo"
    assert first["NFS_SERVER"] == f"{state_dir}/nfs-server,192.168.10.11,2049"
    mount = "kernel,192.168.10.11,2049,/gpucluster-duo,/srv/gpucluster/duo/shared"
    assert first["SHARED_MOUNT"] == f"{mount},{state_dir}"
    assert "NFS_SERVER" not in second and second["SHARED_MOUNT"].startswith(mount)


def test_every_host_guards_the_server_from_its_containers_and_the_serving_host_its_input(run):
    # The guard's rules (components/files/lib/guards.sh) reject NFS from the host's NAT and
    # cluster subnets; tests/test_firewall_guards.py runs them in a network namespace.
    config = parsed()
    for host, subnets, served in (
        ("gpu1", "10.46.3.0/24+10.46.5.0/24", ",input"),
        ("gpu2", "10.47.3.0/24+10.47.5.0/24", ""),
    ):
        guard = f"gpucluster:duo:guard:nfs,nfs,192.168.10.11,2049,{subnets}{served}"
        assert env(run, f"duo-{host}-shared-mount")["NFS_GUARD"] == guard
        assert host_state(config, config.host_named(host))["NFS_GUARD"] == guard
    existing = {"kind": "nfs", "server": "nfs.example.org", "path": "/export/duo", "port": 2050}
    other = run_program(twohost(existing), stack="twohost", secrets=SECRETS)
    guard = "gpucluster:duo:guard:nfs,nfs,nfs.example.org,2050,10.47.3.0/24+10.47.5.0/24"
    assert env(other, "duo-gpu2-shared-mount")["NFS_GUARD"] == guard
    without = run_program(twohost(), stack="twohost", secrets=SECRETS)
    assert "NFS_GUARD" not in host_state(parse_stack_config(twohost()).cluster, config.host_named("gpu2"))
    assert not [r for r in without.resources if "guard" in r.name]


def test_the_serving_hosts_preflight_checks_the_directory_before_anything_changes(run):
    # The check itself: tests/host/test_preflight.py (a directory with files is refused
    # unless adopted, made or served by the cluster already).
    preflight = env(run, "duo-gpu1-host-preflight")
    assert (preflight["SERVED_DIRECTORY"], preflight["SERVED_ADOPT"]) == ("/srv/gpucluster/duo/export", "")
    assert preflight["SERVED_CONF_DIR"] == env(run, "duo-gpu1-nfs-server")["CONF_DIR"]
    assert run.depends_on("duo-gpu1-nfs-server", "duo-gpu1-host-preflight")
    assert "SERVED_DIRECTORY" not in env(run, "duo-gpu2-host-preflight")
    assert env(run, "duo-gpu1-nfs-server")["CLUSTER"] == "duo"  # its marker names the cluster
    adopted = run_program(twohost({**SERVED, "adopt_existing": True}), stack="twohost", secrets=SECRETS)
    assert env(adopted, "duo-gpu1-host-preflight")["SERVED_ADOPT"] == "1"
    assert "adopt_existing" in error_of(twohost({**SERVED, "adopt_existing": "yes"}))


def test_which_existing_directories_the_served_directory_check_refuses(tmp_path):
    def problem(directory: Path) -> str:
        done = subprocess.run(
            [
                *INTERPRETER,
                f'{helpers()}\nserved_directory_problem "$1" duo "$2"',
                "test",
                str(directory),
                str(tmp_path),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout

    site = tmp_path / "site"
    site.mkdir()
    assert problem(site) == "" and problem(tmp_path / "missing") == ""  # empty or missing
    (site / "a").touch()
    (site / "b").mkdir()
    assert problem(site).startswith(f"shared_fs.directory: {site} already exists and holds 2 entries")
    assert "(e.g. a,b)" in problem(site) and "shared_fs.adopt_existing: true" in problem(site)
    (site / ".gpucluster-served").write_text("duo\n")  # the cluster made it
    assert problem(site) == ""
    (site / ".gpucluster-served").write_text("other\n")
    assert "holds 3 entries" in problem(site)
    (tmp_path / "ganesha.conf").write_text(f"EXPORT {{\n  Path = {site};\n}}\n")  # the cluster serves it
    assert problem(site) == ""


def test_an_existing_export_is_only_mounted():
    existing = {"kind": "nfs", "server": "nfs.example.org", "path": "/export/duo", "client": "stand_in"}
    run = run_program(twohost(existing), stack="twohost", secrets=SECRETS)
    assert not [r for r in run.resources if r.name.endswith("-nfs-server")]
    mount = env(run, "duo-gpu2-shared-mount")
    assert (mount["SERVER"], mount["EXPORT"], mount["CLIENT"]) == ("nfs.example.org", "/export/duo", "stand_in")
    assert "def main" in mount["CLIENT_TEXT"]  # the stand-in client travels with the command


def test_without_shared_fs_nothing_changes():
    run = run_program(twohost(), stack="twohost", secrets=SECRETS)
    assert not [r for r in run.resources if r.name.endswith(("-nfs-server", "-shared-mount"))]
    assert "nfs" not in env(run, "duo-gpu2-host-packages")["PACKAGES"]
    config = parse_stack_config(twohost()).cluster
    assert "SHARED_MOUNT" not in host_state(config, config.host_named("gpu2"))


def test_removing_a_host_unmounts_it_there_and_narrows_the_export():
    two = host_commands(run_program(twohost(SERVED), stack="twohost", secrets=SECRETS))
    smaller = twohost(SERVED)
    cluster = smaller["cluster"]
    cluster["hosts"] = cluster["hosts"][:1]
    cluster["nodes"] = [node for node in cluster["nodes"] if node["host"] == "gpu1"]
    one = host_commands(run_program(smaller, stack="twohost", secrets=SECRETS))
    state = State({c.urn: StateEntry(c) for c in two})
    actions = {next(c.name for c in [*two, *one] if c.urn == urn): a for urn, a in plan(state, one).items()}
    assert actions["duo-gpu2-shared-mount"] == "delete"
    unmount = next(c for c in two if c.name == "duo-gpu2-shared-mount").delete
    assert "shared_mount_down" in unmount
    # The export now admits gpu1 only: the server's config changes, the server stays.
    assert actions["duo-gpu1-nfs-server"] == "update" and actions["duo-gpu1-shared-mount"] == "same"
