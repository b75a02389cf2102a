"""End-to-end: a node renamed with its addresses kept, applied to a running cluster.

The rename is a new container and slurmd under the new name, with the old ones deleted at the
end of the update (the engine's order for a changed URN; the real engine applies it).
Both containers hold the same addresses, so the new container's create stops the old one
before it starts. A sampler watches the running containers during the whole update: never two
on one address. At the end one container holds the addresses, under the new name, and Slurm
runs a job on it.
"""

import contextlib
import threading
import time
from pathlib import Path

import pytest

from tests.harness.e2e_teardown import RENAME_CLUSTER, STACK, rename_config, teardown_rename
from tests.harness.engine_cluster import CommandFailedError, State, destroy_state, host_commands, up
from tests.harness.program_harness import run_program
from tests.test_e2e import host_snapshot, leftovers, require_host, sh, slurm_env

pytestmark = pytest.mark.e2e

CLUSTER = RENAME_CLUSTER
SLURM = slurm_env(CLUSTER)
OLD, NEW = f"{CLUSTER}-c001", f"{CLUSTER}-c009"
ADDRESSES = ("10.49.3.3", "10.49.5.2")  # c001's, kept by c009


def configured_addresses(container: str) -> set[str]:
    """The IPv4 addresses the container's LXC config gives it (what it holds while running)."""
    conf = Path(f"/var/lib/lxc/{container}/gpucluster.conf")
    try:
        lines = conf.read_text().splitlines()
    except OSError:
        return set()
    return {
        line.split("=", 1)[1].strip().split("/")[0]
        for line in lines
        if line.startswith("lxc.net.") and ".ipv4.address" in line
    }


def running_containers() -> list[str]:
    """This cluster's containers that are not stopped (starting ones included)."""
    names = sh("lxc-ls", "--running", "-1").stdout.split()
    return sorted(name for name in names if name.startswith(f"{CLUSTER}-"))


class Sampler:
    """Samples, every few tenths of a second, which running container holds which address."""

    def __init__(self):
        self.samples: list[tuple[float, dict[str, list[str]]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            holders: dict[str, list[str]] = {}
            for name in running_containers():
                for address in configured_addresses(name):
                    holders.setdefault(address, []).append(name)
            self.samples.append((time.monotonic(), holders))
            self._stop.wait(0.2)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def shared(self) -> list[tuple[float, str, list[str]]]:
        """Every sample where two running containers held one address."""
        start = self.samples[0][0]
        return [
            (round(at - start, 1), address, names)
            for at, holders in self.samples
            for address, names in holders.items()
            if len(names) > 1
        ]

    def first_running(self, name: str) -> dict[str, list[str]] | None:
        """The first sample in which `name` was running."""
        return next((holders for _, holders in self.samples if name in running_in(holders)), None)


def node_states() -> dict[str, str]:
    lines = sh("sinfo", "-h", "-N", "-o", "%N %T", env=SLURM).stdout.splitlines()
    return dict(line.split() for line in lines if line.strip())


def wait_for(condition: str, seconds: int = 90) -> None:
    loop = f"for _ in $(seq {seconds * 2}); do {condition} && exit 0; sleep 0.5; done; exit 1"
    sh("bash", "-c", loop, env=SLURM, timeout=seconds + 30)


def test_a_node_renamed_with_its_addresses_never_shares_them(capsys):
    require_host()
    before_config, after_config = rename_config(), rename_config(renamed=True)
    before_commands = host_commands(run_program(before_config, stack=STACK))
    after_commands = host_commands(run_program(after_config, stack=STACK))
    teardown_rename()
    before = host_snapshot()
    state = State()
    report: list[str] = []
    try:
        started = time.monotonic()
        up(state, before_commands)
        report.append(f"bring-up (2 nodes, the node image another test cluster kept copied, or built): "
                      f"{time.monotonic() - started:.1f} s")  # fmt: skip
        wait_for('[ "$(sinfo -h -o %T | sort -u)" = idle ]')
        assert sh("srun", "--chdir=/tmp", "-w", "c001", "hostname", env=SLURM).stdout.strip() == "c001"
        assert running_containers() == [f"{CLUSTER}-c000", OLD]

        with Sampler() as sampler:
            started = time.monotonic()
            timeline, actions = up(state, after_commands)
        report.append(f"rename c001 -> c009: {time.monotonic() - started:.1f} s, {len(sampler.samples)} samples")
        changed = {name: action for name, action in actions.items() if action not in {"same"}}
        report.append("changed: " + ", ".join(f"{n} ({a})" for n, a in sorted(changed.items())))
        assert changed[f"{NEW}-lxc"] == "create" and changed[f"{NEW}-slurm-slurmd"] == "create", changed
        assert changed[f"{OLD}-lxc"] == "delete" and changed[f"{OLD}-slurm-slurmd"] == "delete", changed
        # The engine's order: the old container is deleted only after the new one was made.
        order = [(step.name, step.phase) for step in sorted(timeline.steps, key=lambda s: s.started)]
        assert order.index((f"{OLD}-lxc", "delete")) > order.index((f"{NEW}-lxc", "create")), order

        # Never two running containers on one address; the old one stopped before the new one ran.
        assert sampler.shared() == [], sampler.shared()
        old_ran = sampler.first_running(OLD)
        assert old_ran is not None and old_ran[ADDRESSES[0]] == [OLD], "the sampler never saw the old container"
        new_ran = sampler.first_running(NEW)
        assert new_ran is not None and OLD not in running_in(new_ran), new_ran
        create_log = state.resources[urn_of(after_commands, f"{NEW}-lxc")].stderr
        stopping = f"{OLD} holds an address of {NEW} (a renamed node): stopping it"
        assert stopping in create_log, create_log
        report.append(f"{NEW}'s create: {stopping}")

        # The end: one container with those addresses, under the new name; the old one gone.
        assert not Path(f"/var/lib/lxc/{OLD}").exists()
        assert running_containers() == [f"{CLUSTER}-c000", NEW]
        for address in ADDRESSES:
            holders = [name for name in running_containers() if address in configured_addresses(name)]
            assert holders == [NEW], (address, holders)
        live = sh("lxc-info", "-n", NEW, "-iH").stdout.split()
        assert set(ADDRESSES) <= set(live), live
        wait_for('[ "$(sinfo -h -n c009 -o %T)" = idle ]')
        assert node_states() == {"c000": "idle", "c009": "idle"}, node_states()
        ran = sh("srun", "--chdir=/tmp", "-w", "c009", "hostname", env=SLURM).stdout.strip()
        assert ran == "c009", ran
        report.append(f"sinfo: {node_states()}; srun -w c009 hostname: {ran}")
    finally:
        with contextlib.suppress(CommandFailedError):
            destroy_state(state)
        teardown_rename()

    assert leftovers(CLUSTER) == []
    after = host_snapshot()
    assert after == before, {key: (before[key], after[key]) for key in before if before[key] != after[key]}
    with capsys.disabled():
        print("\n== node renamed, addresses kept ==\n" + "\n".join(report))


def running_in(holders: dict[str, list[str]]) -> set[str]:
    return {name for names in holders.values() for name in names}


def urn_of(commands, name: str) -> str:
    return next(c.urn for c in commands if c.name == name)
