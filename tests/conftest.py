"""Fixtures shared by the end-to-end tests."""

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def kept_images_purged():
    """The names of the clusters an end-to-end test made: destroy keeps their node image, so
    the tests after it restore the image instead of building it; at the end of the session
    their kept files are purged (./purge-kept.sh), and the host is as it was."""
    clusters: set[str] = set()
    yield clusters
    for cluster in sorted(clusters):
        subprocess.run([str(ROOT / "purge-kept.sh"), cluster], capture_output=True, check=False)
