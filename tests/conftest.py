"""Fixtures shared by the end-to-end tests, and which tests may run beside them (pytest-xdist groups)."""

import os
import signal
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Tests that change nothing on the host (mocks, rendering, previews, a loopback API server,
# their own temporary files). `./test.sh` runs two pytest-xdist workers (`--dist loadgroup`):
# these are shared between both, while every other test (the end-to-end clusters, whatever
# makes links, rules, mounts, containers or daemons, and all that is not listed here) goes to
# one worker, one at a time, as in a serial run: the host snapshots they compare stay theirs.
HOST_NEUTRAL = (
    "tests/app/",
    "tests/aws/test_ec2.py",
    "tests/aws/test_ec2_config.py",
    "tests/aws/test_ec2_replacement.py",
    "tests/aws/test_efs.py",
    "tests/aws/test_user_data.py",
    "tests/burst/test_burst_config.py",
    "tests/burst/test_burst_destroy.py",
    "tests/burst/test_burst_graph.py",
    "tests/burst/test_burst_programs.py",
    "tests/burst/test_burst_programs_standalone.py",
    "tests/burst/test_burst_slurm_conf.py",
    "tests/harness/test_engine_diagnostics.py",
    "tests/harness/test_plan.py",
    "tests/kubernetes/",
    "tests/metrics/test_render.py",
    "tests/review/",
    "tests/slurm/test_login.py",
    "tests/test_config.py",
    "tests/test_docs.py",
    "tests/test_fixtures.py",
    "tests/test_gpu_node_check.py",
    "tests/test_graph.py",
    "tests/test_hosts.py",
    "tests/test_layers.py",
    "tests/test_layout.py",
    "tests/test_moves.py",
    "tests/test_outputs.py",
    "tests/test_parallelism.py",
    "tests/test_pulumi_wrappers.py",
    "tests/test_stacks.py",
    "tests/test_stand_in_nfs_handles.py",
    "tests/upgrade/test_upgrade.py",
)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    # Under `--dist loadgroup` each worker's items carry their group in the node id; without it
    # the host's tests would run two at a time (pytest-xdist 3.8 under pytest 9 does not group).
    if config.getoption("loadgroup", default=False):
        ungrouped = [i.nodeid for i in items if i.get_closest_marker("xdist_group") and "@" not in i.nodeid]
        if ungrouped:
            raise pytest.UsageError(f"pytest-xdist did not group {ungrouped[0]}: see requirements.txt's pytest pin")


def pytest_itemcollected(item):
    # At collection, before pytest-xdist reads the groups (pytest_collection_modifyitems).
    path = item.path.relative_to(ROOT).as_posix()
    marked = item.get_closest_marker("e2e") or item.get_closest_marker("privileged")
    if marked or not path.startswith(HOST_NEUTRAL):
        item.add_marker(pytest.mark.xdist_group("host"))


@pytest.fixture(scope="session", autouse=True)
def kept_images_purged():
    """Destroy keeps a cluster's node image, so the end-to-end tests after it restore it (or,
    another test cluster, copy it) instead of building it; the tests' own teardowns leave the
    images. At the end of a session that ran end-to-end tests, every test cluster's kept files
    are purged (./purge-kept.sh), and the host is as it was."""
    yield
    if _ran_e2e:  # a session of fast tests (one a test starts, too) leaves them alone
        from tests.harness.e2e_teardown import purge_kept

        purge_kept()


@pytest.fixture(autouse=True)
def measured_as_this_machine(request, monkeypatch):
    """An end-to-end test's mocked runs measure the host as this machine (its MemTotal and online
    CPUs), as its engine's runs do: the commands they give (a node's memory share) and the
    changes the imitation plans are then this machine's. Other tests keep review.program's host."""
    if request.node.get_closest_marker("e2e") is None:
        return
    from review import program

    meminfo = Path("/proc/meminfo").read_text().splitlines()
    total_mb = int(next(line.split()[1] for line in meminfo if line.startswith("MemTotal:"))) // 1024
    monkeypatch.setattr(program, "MEASURED_HOST", f"memory_mb={total_mb} cpus={os.sysconf('SC_NPROCESSORS_ONLN')}\n")


def _interrupted(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config):
    # A run stopped with SIGTERM (a timeout, a kill) cleans up as after Ctrl-C: the tests'
    # finally blocks and the fixtures' teardowns (the kept images' purge) still run.
    signal.signal(signal.SIGTERM, _interrupted)


_host_conflicts: list[str] | None = None
_ran_e2e = False


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """An end-to-end test stops before any of its fixtures change anything when a cluster someone
    brought up on this host (or another program) holds a port, bridge or subnet the tests use."""
    global _host_conflicts, _ran_e2e
    if item.get_closest_marker("e2e") is None:
        return
    _ran_e2e = True
    from tests.harness.host_claims import conflicts, host_facts, refusal

    if _host_conflicts is None:
        _host_conflicts = conflicts(host_facts())
    if _host_conflicts:
        pytest.fail(refusal(_host_conflicts), pytrace=False)
