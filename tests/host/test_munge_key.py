"""The munge key script: a key already in the state directory is trusted only when no one
but root could have written it."""

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from components.common.transport import INTERPRETER, script
from components.host.gpu_host import FILES

# Root-owned key files and directories (chown to root, modes checked against uid 0).
pytestmark = pytest.mark.privileged

CREATE = script(FILES / "munge_key_create.sh")


@pytest.fixture
def state():
    assert os.geteuid() == 0, "the munge key tests need root (key ownership)"
    # Under /var/lib: /tmp itself is writable by everyone, which the script rightly refuses.
    path = Path(tempfile.mkdtemp(prefix="gpucluster-mkt-", dir="/var/lib"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


def create(key: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*INTERPRETER, CREATE],
        env={"PATH": os.environ["PATH"], "MUNGE_KEY_FILE": str(key)},
        capture_output=True,
        text=True,
        check=False,
    )


def test_a_new_key_is_roots_alone_and_kept(state):
    key = state / "c" / "munge.key"
    assert create(key).returncode == 0
    assert (key.stat().st_uid, key.stat().st_mode & 0o777, key.stat().st_size) == (0, 0o400, 1024)
    before = key.read_bytes()
    assert create(key).returncode == 0
    assert key.read_bytes() == before


@pytest.mark.parametrize("mode", [0o644, 0o600, 0o440])
def test_a_planted_key_others_could_write_or_read_is_refused(state, mode):
    key = state / "munge.key"
    key.write_bytes(b"planted")
    key.chmod(mode)
    done = create(key)
    assert done.returncode == 1
    assert "is not a non-empty regular file owned by root with mode 0400" in done.stderr
    assert key.read_bytes() == b"planted"


def test_a_key_not_owned_by_root_is_refused(state):
    key = state / "munge.key"
    key.write_bytes(b"planted")
    key.chmod(0o400)
    os.chown(key, 65534, 65534)
    assert create(key).returncode == 1


def test_a_world_writable_state_dir_is_refused(state):
    state.chmod(0o777)
    done = create(state / "munge.key")
    assert done.returncode == 1
    assert "(host.state_dir) is not root-owned or is writable by others" in done.stderr
    assert not (state / "munge.key").exists()


def test_the_installed_key_is_private_and_the_directories_it_makes_are_not(state):
    """The cluster's directory made by the key's install is traversable (the status writer runs
    as nobody under it); only the key is root's alone."""
    key = state / "cluster" / "sub" / "munge.key"
    done = subprocess.run(
        [*INTERPRETER, script(FILES / "munge_key_install_create.sh")],
        env={"PATH": os.environ["PATH"], "MUNGE_KEY_FILE": str(key)},
        input="QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQQ==\n",
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert oct(key.stat().st_mode & 0o777) == "0o400"
    for directory in (state / "cluster", state / "cluster" / "sub"):
        assert oct(directory.stat().st_mode & 0o777) == "0o755", directory
