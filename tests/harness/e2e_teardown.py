"""Remove whatever the end-to-end test may have left: the `e2e` stack's resources (destroy is
idempotent and succeeds when things are gone), those of its accounting variant (with the
database dumps destroy would keep), of its SSH variants (one host over SSH, two hosts) with
their stand-in SSH hosts, of its rename variant (cluster e2r) and its metrics variant, the
outside namespace and the stand-in GPUs.

Used by tests/test_e2e.py before and after its run, and by .ci/run before the tests and at its end:
`python tests/harness/e2e_teardown.py`, which also removes what the two-host cluster of
tests/test_e2e_shared_fs.py left and purges the node image destroy kept.
"""

import copy
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[2])]  # the repository root, when run as a script

from tests.harness import ssh_hosts  # noqa: E402
from tests.harness.command_executor import HostCommand, destroy, host_commands  # noqa: E402
from tests.harness.program_harness import run_program, stack_config  # noqa: E402
from tests.harness.registry import stop_left_registries  # noqa: E402
from tests.harness.ssh_hosts import SshHost  # noqa: E402

STACK = "e2e"
PLACEMENTS = ("container", "host")  # where slurmctld runs: both layouts are brought up
STAND_IN_DIR = Path("/run/gpucluster-e2e-dev")
OUTSIDE_NS, OUTSIDE_LINK = "e2e-outside", "e2e-out0"

# The stand-in SSH hosts: this machine through an sshd of the test's own, and a second host
# made of a network namespace, joined to this machine by 10.45.0.0/30 (tests/harness/ssh_hosts.py).
SSH_HOST = SshHost("ssh", "127.0.0.1", 2222)
SECOND_HOST = SshHost("h2", "10.45.0.2", 22, netns="e2e-h2", site_address="10.45.0.1")
SECRET = "e2eSshKey"  # the stack's secret config key holding the private key
# What teardown renders the SSH stacks with: their commands then run here, without SSH.
PLACEHOLDER_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPYlNyoaydYoKMRgJ+WsOYtSmoIUfz4I73ETeuj1Ak95"
PLACEHOLDER_SECRETS = {SECRET: "placeholder"}
SHARED_DIR = "/srv/gpucluster/e2e/shared"


def remove_outside_namespace() -> None:
    subprocess.run(["ip", "netns", "del", OUTSIDE_NS], capture_output=True, check=False)
    subprocess.run(["ip", "link", "del", OUTSIDE_LINK], capture_output=True, check=False)


def remove_stand_in_gpus() -> None:
    """The stand-ins are the program's (its destroy removes them); this is for a destroy cut short."""
    for path in STAND_IN_DIR.glob("*"):
        path.unlink()
    if STAND_IN_DIR.exists():
        STAND_IN_DIR.rmdir()


def e2e_config(placement: str, *, max_time: str | None = None, grow: bool = False) -> dict:
    """The e2e stack's config with slurmctld placed in c000 ('container') or on the host;
    optionally with another partition MaxTime, and grown by a fifth node (c004: two GPUs, each
    in two Slurm shards, where tests/test_e2e_containment.py runs its jobs)."""
    config = stack_config(STACK)
    cluster = config["cluster"]
    cluster["slurm"]["controller"] = (
        {"placement": "container", "node": "c000"} if placement == "container" else {"placement": "host"}
    )
    if max_time:
        cluster["slurm"]["partitions"][0]["max_time"] = max_time
    if grow:
        cluster["nodes"].append(
            {
                "name": "c004",
                "nat_address": "10.43.3.6",
                "cluster_address": "10.43.5.5",
                "cpus": 2,
                "gpus": 2,
                "gpu_shards": 2,
            }
        )
        cluster["gpu"]["stand_in"]["count"] = 7  # the web app keeps nvidia4; c004 gets nvidia5 and nvidia6
    return config


def ssh_connection(host: SshHost, host_key: str) -> dict:
    return {
        "kind": "ssh",
        "address": host.address,
        "port": host.port,
        "host_key": host_key,
        "private_key_secret": SECRET,
    }


def one_ssh_host_config(host_key: str = PLACEHOLDER_KEY) -> dict:
    """The e2e stack with its one host reached over SSH (`hosts: [...]`)."""
    config = stack_config(STACK)
    cluster = config["cluster"]
    host = cluster.pop("host")
    cluster["hosts"] = [
        {
            "name": "h1",
            "connection": ssh_connection(SSH_HOST, host_key),
            "shared_dir": host["shared_dir"],
            "network": cluster.pop("network"),
            "gpu": cluster.pop("gpu"),
        }
    ]
    return config


def two_host_config(host_key: str = PLACEHOLDER_KEY, *, second: bool = True) -> dict:
    """Two nodes here (local, slurmctld in c000) and two on the second host (SSH, in its own
    network namespace, with its own LXC path, state and run directories). Both hosts name the
    same shared directory, which on this one machine is one directory: it stands in for a
    network filesystem mounted at that path on every host. `second=False`: the second host
    and its nodes removed from the stack."""
    config = copy.deepcopy(stack_config(STACK))
    cluster = config["cluster"]
    cluster.pop("host"), cluster.pop("network")
    cluster.pop("gpu")
    gpu = {"stand_in": {"count": 2}}  # on each host, in its own run directory
    cluster.pop("web_app")
    hosts = [
        {
            "name": "h1",
            "address": SECOND_HOST.site_address,
            "shared_dir": SHARED_DIR,
            "network": {
                "nat_bridge": {"name": "e2ebr0", "address": "10.43.3.1/24"},
                "cluster_bridge": {"name": "e2ebr1", "subnet": "10.43.5.0/24"},
            },
            "gpu": gpu,
        },
        {
            "name": "h2",
            "connection": ssh_connection(SECOND_HOST, host_key),
            "address": SECOND_HOST.address,
            "state_dir": "/var/lib/gpucluster-e2e-h2",
            "run_dir": "/run/gpucluster-e2e-h2-run",
            "lxc_dir": "/var/lib/lxc-e2e-h2",
            "shared_dir": SHARED_DIR,
            # The same bridge names as h1's: they live in another network namespace.
            "network": {
                "nat_bridge": {"name": "e2ebr0", "address": "10.46.3.1/24"},
                "cluster_bridge": {"name": "e2ebr1", "subnet": "10.46.5.0/24"},
            },
            "gpu": gpu,
        },
    ]
    nodes = [
        {"name": "c000", "host": "h1", "nat_address": "10.43.3.2", "cluster_address": "10.43.5.2"},
        {"name": "c001", "host": "h1", "nat_address": "10.43.3.3", "cluster_address": "10.43.5.3"},
        {"name": "c002", "host": "h2", "nat_address": "10.46.3.2", "cluster_address": "10.46.5.2"},
        {"name": "c003", "host": "h2", "nat_address": "10.46.3.3", "cluster_address": "10.46.5.3"},
    ]
    if not second:
        hosts, nodes = hosts[:1], nodes[:2]
        del hosts[0]["address"]
    cluster["hosts"], cluster["nodes"] = hosts, nodes
    return config


# The first host reached over SSH too (this machine through the test's sshd), with a key of its own.
FIRST_HOST_SECRET = "e2eSshKeyH1"


def two_ssh_hosts_config(first_key: str = PLACEHOLDER_KEY, second_key: str = PLACEHOLDER_KEY, *, moved=False) -> dict:
    """The two-host stack with both hosts over SSH: h1 is this machine through the test's sshd.
    `moved`: slurmctld moved from c000 (h1) to c002 (h2), and node c003 from h2 to h1."""
    config = two_host_config(second_key)
    cluster = config["cluster"]
    first = cluster["hosts"][0]
    first["connection"] = {**ssh_connection(SSH_HOST, first_key), "private_key_secret": FIRST_HOST_SECRET}
    for host in cluster["hosts"]:
        host["gpu"] = {"stand_in": {"count": 3}}  # room for a third node on h1
    if moved:
        cluster["slurm"]["controller"] = {"placement": "container", "node": "c002"}
        c003 = next(node for node in cluster["nodes"] if node["name"] == "c003")
        c003.update(host="h1", nat_address="10.43.3.6", cluster_address="10.43.5.5")
    return config


def run_here(commands: list[HostCommand], hosts: dict[str, SshHost]) -> list[HostCommand]:
    """The commands as local ones, each remote one run on its stand-in host without SSH
    (`hosts`: by the SSH address): a teardown must work whatever state the sshd is in. The
    sshd bootstrap is left out: the test sshd goes away with its directory."""
    local = []
    for command in commands:
        if command.connection is None:
            local.append(command)
        elif not command.name.endswith(("-ssh-ready", "-sshd-accept-env")):
            prefix = ssh_hosts.host_argv(hosts[command.connection["host"]])
            local.append(replace(command, connection=None, interpreter=(*prefix, "/bin/bash", "-c")))
    return local


def second_host_may_hold_something() -> bool:
    """Whether anything of the second host is left: its namespace, or one of its directories."""
    second = two_host_config()["cluster"]["hosts"][1]
    places = [
        f"/run/netns/{SECOND_HOST.netns}",
        SECOND_HOST.directory,
        *(second[d] for d in ("state_dir", "run_dir", "lxc_dir")),
    ]
    return any(Path(place).exists() for place in places)


def teardown_ssh_stacks() -> None:
    """Destroy what the SSH tests' stacks may have left, then their stand-in hosts."""
    try:
        by_address = {SSH_HOST.address: SSH_HOST, SECOND_HOST.address: SECOND_HOST}
        second = second_host_may_hold_something()
        secrets = {**PLACEHOLDER_SECRETS, FIRST_HOST_SECRET: "placeholder"}
        configs = (one_ssh_host_config(), two_host_config(), two_ssh_hosts_config(), two_ssh_hosts_config(moved=True))
        for config in configs:
            commands = host_commands(run_program(config, stack=STACK, secrets=secrets))
            if not second:  # nothing there: no namespace is made just to delete nothing in it
                commands = [c for c in commands if not (c.connection and c.connection["host"] == SECOND_HOST.address)]
            destroy(run_here(commands, by_address))
    finally:
        ssh_hosts.remove(SSH_HOST)
        ssh_hosts.remove(SECOND_HOST)
        # The second host's own directories, as the stack names them (empty after a destroy).
        second = two_host_config()["cluster"]["hosts"][1]
        for directory in (second["state_dir"], second["run_dir"], second["lxc_dir"]):
            subprocess.run(["rmdir", directory], capture_output=True, check=False)
        # The two-host test makes the shared directory itself (a site's network filesystem).
        for directory in (SHARED_DIR, Path(SHARED_DIR).parent, Path(SHARED_DIR).parent.parent):
            subprocess.run(["rmdir", str(directory)], capture_output=True, check=False)


# The accounting variant (tests/test_e2e_accounting.py): two nodes, no web app, a database
# container, three people in two accounts with GPU limits, and the GPU health check.
ACCOUNTING_USERS = [
    {"name": "alice", "uid": 2101, "gid": 2101},
    {"name": "bob", "uid": 2102, "gid": 2102},
    {"name": "carol", "uid": 2103, "gid": 2103},
]
ACCOUNTING = {
    "nat_address": "10.43.3.20",
    "qos": [{"name": "short", "priority": 10, "max_wall_minutes": 60}],
    "accounts": [
        {"name": "physics", "gpus": 1, "users": ["alice"], "qos": ["normal", "short"], "default_qos": "normal"},
        {"name": "chem", "gpus": 2, "users": ["bob", "alice"]},
    ],
}
# The same cluster after a change of its accounts: physics may hold 2 GPUs, chem is gone,
# bio is new (carol, and bob, whose default account it becomes), short limits GPUs per user.
CHANGED_ACCOUNTING = {
    "nat_address": "10.43.3.20",
    "qos": [{"name": "short", "priority": 20, "max_gpus_per_user": 1, "max_wall_minutes": 1440}],
    "accounts": [
        {"name": "physics", "gpus": 2, "users": ["alice"], "qos": ["normal", "short"], "default_qos": "short"},
        {"name": "bio", "gpus": 1, "users": ["carol", "bob"], "qos": ["short"]},
    ],
}
HEALTH_INTERVAL_S = 10
# The accounting variant's login node (with `login_keys`): SSH forwarded from host port 7022.
LOGIN = {"name": "login", "nat_address": "10.43.3.40", "host_port": 7022}
# A well-formed key nobody holds: the teardown's config names a login node without real keys.
PLACEHOLDER_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEB"


def accounting_config(
    *, changed: bool = False, restore: bool = False, keep_dump: bool = True, login_keys: dict | None = None
) -> dict:
    """`login_keys` (person: public key line, or a list of them): with a login node where those people log in."""
    config = stack_config(STACK)
    cluster = config["cluster"]
    cluster["nodes"] = cluster["nodes"][:2]
    cluster["gpu"]["stand_in"]["count"] = 2
    # Stand-ins only: no driver files from the host, whatever it has (the health check counts
    # the GPUs nvidia-smi lists where there is one).
    cluster["gpu"]["driver_files"] = []
    cluster["gpu"]["cuda_path"] = None
    cluster.pop("web_app", None)
    cluster["slurm"]["controller"] = {"placement": "container", "node": "c000"}
    cluster["slurm"]["health_check"] = {"interval_s": HEALTH_INTERVAL_S}
    cluster["users"] = copy.deepcopy(ACCOUNTING_USERS)
    cluster["accounting"] = copy.deepcopy(CHANGED_ACCOUNTING if changed else ACCOUNTING)
    cluster["accounting"].update(restore=restore, keep_dump=keep_dump)
    if login_keys is not None:
        cluster["login"] = copy.deepcopy(LOGIN)
        for user in cluster["users"]:
            if user["name"] in login_keys:
                given = login_keys[user["name"]]
                user["ssh_keys"] = list(given) if isinstance(given, list) else [given]
    return config


def remove_kept_accounting(cluster: str = STACK) -> None:
    """The database dumps destroy keeps (./purge-kept.sh removes them for an operator)."""
    kept = Path(f"/var/cache/gpucluster/{cluster}/accounting")
    if kept.exists():
        shutil.rmtree(kept)
    for directory in (kept.parent, kept.parent.parent):
        if directory.exists() and not any(directory.iterdir()):
            directory.rmdir()


# The rename variant (tests/test_e2e_rename.py): a cluster of its own, two nodes, no web app;
# `renamed`: node c001 renamed c009 with its addresses kept.
RENAME_CLUSTER = "e2r"


def rename_config(*, renamed: bool = False) -> dict:
    config = stack_config(STACK)
    cluster = config["cluster"]
    cluster["name"] = RENAME_CLUSTER
    cluster["host"] = {"shared_dir": f"/srv/gpucluster/{RENAME_CLUSTER}/shared"}
    cluster["network"] = {
        "nat_bridge": {"name": f"{RENAME_CLUSTER}br0", "address": "10.49.3.1/24"},
        "cluster_bridge": {"name": f"{RENAME_CLUSTER}br1", "subnet": "10.49.5.0/24"},
    }
    cluster["gpu"] = {"stand_in": {"count": 2}}
    cluster["nodes"] = [
        {"name": "c000", "nat_address": "10.49.3.2", "cluster_address": "10.49.5.1"},
        {"name": "c009" if renamed else "c001", "nat_address": "10.49.3.3", "cluster_address": "10.49.5.2"},
    ]
    cluster["slurm"]["controller"] = {"placement": "container", "node": "c000"}
    cluster.pop("web_app", None)
    return config


def teardown_rename() -> None:
    """Both names' commands: whichever a cut-short run left goes."""
    for renamed in (True, False):
        destroy(host_commands(run_program(rename_config(renamed=renamed), stack=STACK)))


# The metrics variant (tests/test_e2e_metrics.py): two nodes, the web app without a GPU,
# Prometheus in its container, alerts that fire at once and are evaluated every 2 s.
METRICS = {
    "nat_address": "10.43.3.30",
    "scrape_interval_s": 5,
    "evaluation_interval_s": 2,
    "alert_for_s": 0,
    "pending_alert_s": 600,
    "retention_days": 1,
}


def metrics_config() -> dict:
    config = stack_config(STACK)
    cluster = config["cluster"]
    cluster["nodes"] = cluster["nodes"][:2]
    cluster["gpu"]["stand_in"]["count"] = 2
    cluster["gpu"]["driver_files"] = []
    cluster["gpu"]["cuda_path"] = None
    cluster["web_app"]["gpus"] = []
    cluster["metrics"] = copy.deepcopy(METRICS)
    return config


# Every cluster the end-to-end tests bring up: what destroy kept of them goes too.
TEST_CLUSTERS = ("e2e", "e2f", "e2x", "sidea", "sideb", RENAME_CLUSTER, "e2en", "bst")


KEEP_DIR = Path("/var/cache/gpucluster")


# The stack's registry (containers.registry) of tests/harness/release_e2e.py: destroy leaves
# nothing (tests/containers/test_registry_data.py proves what keep_images keeps).
STACK_REGISTRY = {"nat_address": "10.43.3.21", "push_password_secret": "registryPushPassword", "keep_images": False}


def stack_registry_commands() -> list:
    """The commands of the stack's registry of tests/harness/release_e2e.py."""
    config = e2e_config("container")
    config["cluster"]["containers"] = {"registry": STACK_REGISTRY}
    secrets = {STACK_REGISTRY["push_password_secret"]: "teardown"}
    commands = host_commands(run_program(config, stack=STACK, secrets=secrets))
    return [command for command in commands if command.name.startswith(f"{STACK}-registry-")]


def purge_kept(images: bool = True) -> None:
    """What destroy deliberately kept of the test clusters (an earlier, cut-short run's too),
    removed with the operator's own command, so no run trips over an earlier one's. With
    `images=False` (a test's own teardown) their node images stay: the next test cluster
    restores or copies one instead of building it; the session purges them at its end."""
    for cluster in TEST_CLUSTERS:
        if images:
            purge = Path(__file__).resolve().parents[2] / "purge-kept.sh"
            subprocess.run(["bash", str(purge), cluster], capture_output=True, check=False)
        else:
            _remove_all_but_images(KEEP_DIR / cluster)
    if KEEP_DIR.exists() and not any(KEEP_DIR.iterdir()):
        KEEP_DIR.rmdir()


def _remove_all_but_images(directory: Path) -> None:
    """Everything kept under `directory` but node images (a host's folder holds its own)."""
    if not directory.is_dir():
        return
    for entry in directory.iterdir():
        if entry.name.startswith("node-image-"):
            continue
        if entry.is_dir() and any(entry.glob("node-image-*")):
            _remove_all_but_images(entry)
        elif entry.is_dir():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    if not any(directory.iterdir()):
        directory.rmdir()


def teardown(images: bool = False) -> None:
    """Every test stack destroyed, and what they kept removed (their node images with
    `images`: a test's teardown leaves them to the next test)."""
    remove_outside_namespace()
    try:
        teardown_ssh_stacks()
        teardown_rename()
        # Without keeping a dump: what a cut-short run left is not worth keeping.
        # With its login node (whatever keys it had: a destroy does not read them).
        teardown_accounting = accounting_config(keep_dump=False, login_keys={"alice": PLACEHOLDER_KEY})
        destroy(host_commands(run_program(teardown_accounting, stack=STACK)))
        destroy(host_commands(run_program(metrics_config(), stack=STACK)))
        destroy(stack_registry_commands())
        for placement in PLACEMENTS:
            # The grown config holds every command of the smaller ones.
            destroy(host_commands(run_program(e2e_config(placement, grow=True), stack=STACK)))
    finally:
        remove_stand_in_gpus()
        remove_kept_accounting()
        purge_kept(images)
        stop_left_registries()


if __name__ == "__main__":
    from tests.test_e2e_shared_fs import teardown_stack as teardown_two_hosts_through_a_jump_host

    # The two-host stack first: its destroy keeps its node images, which the teardown purges.
    teardown_two_hosts_through_a_jump_host()
    teardown(images=True)
