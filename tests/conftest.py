"""Fixtures shared by the end-to-end tests."""

import signal

import pytest


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
