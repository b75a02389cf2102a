"""Remove whatever the end-to-end test may have left: the `e2e` stack's resources (destroy is
idempotent and succeeds when things are gone), those of its accounting variant (with the
database dumps destroy would keep), the outside namespace and the stand-in GPUs.

Used by tests/test_e2e.py before and after its run, and by .ci/run when a run is cut short:
`python tests/harness/e2e_teardown.py`.
"""

import copy
import shutil
import subprocess
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[2])]  # the repository root, when run as a script

from tests.harness.command_executor import destroy, host_commands  # noqa: E402
from tests.harness.program_harness import run_program, stack_config  # noqa: E402

STACK = "e2e"
PLACEMENTS = ("container", "host")  # where slurmctld runs: both layouts are brought up
STAND_IN_DIR = Path("/run/gpucluster-e2e-dev")
OUTSIDE_NS, OUTSIDE_LINK = "e2e-outside", "e2e-out0"


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
    optionally with another partition MaxTime, and grown by a fifth node (c004)."""
    config = stack_config(STACK)
    cluster = config["cluster"]
    cluster["slurm"]["controller"] = (
        {"placement": "container", "node": "c000"} if placement == "container" else {"placement": "host"}
    )
    if max_time:
        cluster["slurm"]["partitions"][0]["max_time"] = max_time
    if grow:
        cluster["nodes"].append({"name": "c004", "nat_address": "10.43.3.6", "cluster_address": "10.43.5.5"})
        cluster["gpu"]["stand_in"]["count"] = 6  # the web app keeps nvidia4; c004 gets nvidia5
    return config


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


def accounting_config(*, changed: bool = False, restore: bool = False, keep_dump: bool = True) -> dict:
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
    return config


def remove_kept_accounting(cluster: str = STACK) -> None:
    """The database dumps destroy keeps (./purge-kept.sh removes them for an operator)."""
    kept = Path(f"/var/cache/gpucluster/{cluster}/accounting")
    if kept.exists():
        shutil.rmtree(kept)
    for directory in (kept.parent, kept.parent.parent):
        if directory.exists() and not any(directory.iterdir()):
            directory.rmdir()


# Every cluster the end-to-end tests bring up: what destroy kept of them goes too.
TEST_CLUSTERS = ("e2e", "e2f", "e2x", "sidea", "sideb")


def purge_kept() -> None:
    """What destroy deliberately kept of the test clusters (an earlier, cut-short run's too),
    removed with the operator's own command, so no run trips over an earlier one's."""
    for cluster in TEST_CLUSTERS:
        purge = Path(__file__).resolve().parents[2] / "purge-kept.sh"
        subprocess.run(["bash", str(purge), cluster], capture_output=True, check=False)
    keep_dir = Path("/var/cache/gpucluster")
    if keep_dir.exists() and not any(keep_dir.iterdir()):
        keep_dir.rmdir()


def teardown() -> None:
    remove_outside_namespace()
    try:
        # Without keeping a dump: what a cut-short run left is not worth keeping.
        destroy(host_commands(run_program(accounting_config(keep_dump=False), stack=STACK)))
        for placement in PLACEMENTS:
            # The grown config holds every command of the smaller ones.
            destroy(host_commands(run_program(e2e_config(placement, grow=True), stack=STACK)))
    finally:
        remove_stand_in_gpus()
        remove_kept_accounting()
        purge_kept()


if __name__ == "__main__":
    teardown()
