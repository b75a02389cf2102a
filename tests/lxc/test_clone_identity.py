"""What lives inside a container is replaced with it, and the engine deletes the old copy of
such a command only after its new copy exists in the new clone of the same name
(the real engine showed it: the old slurmd's delete ran last). Each such delete leaves a
clone other than the one its create reported (`clone=ID`) alone; a create of an earlier
release reported nothing and its delete runs as before."""

import os
import subprocess
from pathlib import Path

import pytest

from components.common.transport import INTERPRETER, script
from components.slurm.node import FILES as SLURM_FILES

DELETES = ["slurmd_delete.sh", "slurmctld_container_delete.sh", "slurmdbd_delete.sh", "database_delete.sh"]
# Jobs in container images: each node's Enroot files and prolog (components/containers).
DELETES += ["../../containers/files/containers_delete.sh"]


def slurmd_delete(tmp_path: Path, previous_stdout: str | None) -> subprocess.CompletedProcess:
    environment = {
        "PATH": os.environ["PATH"],
        "LXC_PATH": str(tmp_path / "lxc"),
        "CONTAINER": "cid-c000",
        "NODE": "c000",
        "CLUSTER_DIR": str(tmp_path / "state"),
    }
    if previous_stdout is not None:
        environment["PULUMI_COMMAND_STDOUT"] = previous_stdout
    return subprocess.run(
        [*INTERPRETER, script(SLURM_FILES / "slurmd_delete.sh")],
        env=environment,
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.fixture
def new_clone(tmp_path: Path) -> Path:
    """A container directory whose clone id is `new`, and the node's marker a create left."""
    (tmp_path / "lxc" / "cid-c000").mkdir(parents=True)
    (tmp_path / "lxc" / "cid-c000" / "gpucluster-clone-id").write_text("new\n")
    marker = tmp_path / "state" / "fresh-nodes" / "c000"
    marker.parent.mkdir(parents=True)
    marker.touch()
    return marker


def test_the_delete_of_a_command_made_in_an_older_clone_leaves_the_new_one_alone(tmp_path, new_clone):
    done = slurmd_delete(tmp_path, "some output\nclone=old")
    assert done.returncode == 0, done.stderr
    assert new_clone.exists(), "the old slurmd's delete removed what the new one set up"


@pytest.mark.parametrize("previous", ["clone=new", "", None])
def test_the_delete_of_a_command_made_in_this_clone_or_by_an_earlier_release_runs(tmp_path, new_clone, previous):
    done = slurmd_delete(tmp_path, previous)
    assert done.returncode == 0, done.stderr
    assert not new_clone.exists()


@pytest.mark.parametrize("name", DELETES)
def test_every_delete_inside_a_replaced_container_checks_its_clone_first(name):
    lines = (SLURM_FILES / name).read_text().splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("require "))
    assert lines[first + 1] == 'created_in_this_clone "$CONTAINER" || exit 0'
    create = (SLURM_FILES / name.replace("_delete", "_create")).read_text().splitlines()
    assert 'report_clone "$CONTAINER"' in create


def test_creates_racing_in_a_fresh_clone_all_read_the_one_id_it_keeps(tmp_path):
    """N12: the id was written lazily with `cat uuid > file`: two creates at once in a fresh
    clone could report different ids, and one later delete was then skipped silently."""
    lib = (Path(__file__).resolve().parents[2] / "components/files/lib/lxc.sh").read_text()
    (tmp_path / "lxc" / "cid-c000").mkdir(parents=True)
    racers = "for i in $(seq 40); do clone_id cid-c000 > out.$i & done; wait; cat out.* | sort | uniq -c"
    done = subprocess.run(
        ["/bin/bash", "-c", f"{lib}\ncd {tmp_path}\n{racers}"],
        env={"PATH": os.environ["PATH"], "LXC_PATH": str(tmp_path / "lxc")},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    kept = (tmp_path / "lxc" / "cid-c000" / "gpucluster-clone-id").read_text()
    assert done.stdout.split() == ["40", kept.strip()], done.stdout
    assert [p.name for p in (tmp_path / "lxc" / "cid-c000").iterdir()] == ["gpucluster-clone-id"]
