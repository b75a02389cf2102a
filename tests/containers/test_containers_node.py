"""A node's part of jobs in container images, run here for real: the prolog that makes each
person's Enroot directories (root, where only root writes; what a person planted is left
alone) and prunes their cached layers as that person, and Enroot's driver hook, which binds
the driver files the node has from its host, and nothing else (privileged: chown, setpriv,
mount namespaces)."""

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from components.containers.config import ContainersConfig
from components.containers.node_files import FILES, prolog

pytestmark = pytest.mark.privileged
ALICE, BOB = 41600, 41601  # people's uids no one here has


def run_prolog(tmp_path: Path, uid: int, limit_mb: int = 20480) -> subprocess.CompletedProcess:
    data, runtime = tmp_path / "data", tmp_path / "run"
    # A scratch directory under /tmp, which the config refuses for a real node: not validated.
    text = prolog(ContainersConfig.model_construct(data_dir=str(data), cache_limit_mb=limit_mb))
    text = text.replace("RUNTIME_DIR=/run/enroot", f"RUNTIME_DIR={runtime}")
    script = tmp_path / "prolog"
    script.write_text(text)
    script.chmod(0o755)
    env = {"PATH": os.environ["PATH"], "SLURM_JOB_UID": str(uid), "SLURM_JOB_GID": str(uid)}
    return subprocess.run([str(script)], env=env, capture_output=True, text=True, timeout=60, check=False)


def owner_and_mode(path: Path) -> tuple[int, str]:
    info = path.lstat()
    return info.st_uid, oct(info.st_mode & 0o7777)


def test_each_person_gets_directories_of_their_own_made_by_root(tmp_path):
    assert run_prolog(tmp_path, ALICE).returncode == 0
    assert run_prolog(tmp_path, BOB).returncode == 0
    for parent in ("data/cache", "data/data", "run"):
        assert owner_and_mode(tmp_path / parent) == (0, "0o755")
        assert owner_and_mode(tmp_path / parent / f"user-{ALICE}") == (ALICE, "0o700")
        assert owner_and_mode(tmp_path / parent / f"user-{BOB}") == (BOB, "0o700")
    # Again: nothing changes, nothing fails.
    before = {p: owner_and_mode(p) for p in tmp_path.rglob("*")}
    assert run_prolog(tmp_path, ALICE).returncode == 0
    assert {p: owner_and_mode(p) for p in tmp_path.rglob("*")} == before


def test_what_stands_at_a_persons_directory_is_never_chowned_or_followed(tmp_path):
    """A link where a person's directory goes (as if the data directory were writable to
    others): root neither follows it nor changes its target; the job still starts."""
    target = tmp_path / "etc-standin"
    target.mkdir()
    (tmp_path / "data" / "cache").mkdir(parents=True)
    (tmp_path / "data" / "cache" / f"user-{ALICE}").symlink_to(target)
    foreign = tmp_path / "data" / "data" / f"user-{ALICE}"
    foreign.mkdir(parents=True)
    os.chown(foreign, BOB, BOB)
    done = run_prolog(tmp_path, ALICE)
    assert done.returncode == 0, done.stderr
    assert owner_and_mode(target) == (0, "0o755")
    assert (tmp_path / "data" / "cache" / f"user-{ALICE}").is_symlink()
    assert owner_and_mode(foreign)[0] == BOB


@pytest.fixture
def open_dir():
    """A directory others may pass through, as a node's /var/lib is (pytest's tmp_path is
    root's alone, where the prune, running as the person, could not reach her cache)."""
    made = Path(tempfile.mkdtemp(prefix="gpucluster-prolog-"))
    made.chmod(0o755)
    yield made
    shutil.rmtree(made)


def test_cached_layers_past_the_limit_go_least_recently_used_first_as_the_person(open_dir):
    tmp_path = open_dir
    assert run_prolog(tmp_path, ALICE).returncode == 0
    cache = tmp_path / "data" / "cache" / f"user-{ALICE}"
    now = time.time()
    for age, name in enumerate(["newest", "middle", "oldest"]):
        layer = cache / f"sha256-{name}"
        layer.touch()
        os.truncate(layer, 100 * 1024 * 1024)  # 100 MiB each (sparse: the prune counts their size)
        os.chown(layer, ALICE, ALICE)
        os.utime(layer, (now - 3600 * age, now - 3600 * age))
    assert run_prolog(tmp_path, ALICE, limit_mb=256).returncode == 0
    left = sorted(p.name for p in cache.iterdir())
    assert left == ["sha256-middle", "sha256-newest"], left


def test_the_driver_hook_binds_the_nodes_driver_files_from_its_host_and_nothing_else(tmp_path):
    """In a mount namespace where a library of the loader's directory is a bind mount (as the
    node's driver files are, from the host): the hook asks Enroot to bind exactly that, read
    only, and rebuilds the container's loader cache; a mount elsewhere is not bound."""
    library = next(Path("/usr/lib").glob("*-linux-gnu/libz.so.1")).resolve()
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "enroot-mount").write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/args\ncat > {tmp_path}/mounts\n')
    (tools / "ldconfig").write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/ldconfig\n')
    for tool in tools.iterdir():
        tool.chmod(0o755)
    script = (
        f'mount --bind "{library}" "{library}" && mount --bind /etc/hostname /etc/hostname && '
        f"PATH={tools}:$PATH ENROOT_ROOTFS={tmp_path}/rootfs bash {FILES / 'driver_hook.sh'}"
    )
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "args").read_text().split() == ["--root", f"{tmp_path}/rootfs", "-"]
    assert (tmp_path / "mounts").read_text() == f"{library} {library} none x-create=file,bind,ro,nosuid,nodev,private\n"
    assert (tmp_path / "ldconfig").read_text().split() == ["-r", f"{tmp_path}/rootfs"]


def test_the_driver_hook_does_nothing_on_a_node_without_driver_files(tmp_path):
    done = subprocess.run(
        ["bash", str(FILES / "driver_hook.sh")],
        env={"PATH": f"{tmp_path}:/usr/bin:/bin", "ENROOT_ROOTFS": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0 and not done.stdout and not done.stderr, done
