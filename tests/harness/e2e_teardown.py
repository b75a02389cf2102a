"""Remove whatever the end-to-end test may have left: the `e2e` stack's resources (destroy is
idempotent and succeeds when things are gone), the outside namespace and the stand-in GPUs.

Used by tests/test_e2e.py before and after its run, and by .ci/run when a run is cut short:
`python tests/harness/e2e_teardown.py`, which also purges the node image destroy kept.
"""

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
        cluster["gpu"]["stand_in"]["count"] = 5
    return config


def teardown() -> None:
    remove_outside_namespace()
    try:
        for placement in PLACEMENTS:
            # The grown config holds every command of the smaller ones.
            destroy(host_commands(run_program(e2e_config(placement, grow=True), stack=STACK)))
    finally:
        remove_stand_in_gpus()


if __name__ == "__main__":
    teardown()
    subprocess.run([str(Path(__file__).resolve().parents[2] / "purge-kept.sh"), STACK], check=False)
