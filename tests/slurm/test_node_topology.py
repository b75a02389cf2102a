"""The CPU topology slurmd reads in a node (components/files/lib/hwloc.sh): Slurm numbers the
cores of the topology's packages, so the node's own CPUs must be the package, whichever of the
host's CPUs they are. Checked in the XML and by slurmd -C, which loads it with the hwloc library it links: an
order hwloc refuses would be named on its stderr."""

import os
import subprocess
from xml.etree import ElementTree

import pytest

from components.common.transport import helpers


def topology(online: str, node: str, tmp_path) -> str:
    script = helpers(["core.sh", "hwloc.sh"]) + 'hwloc_topology_xml "$1" "$2"\n'
    done = subprocess.run(["bash", "-c", script, "hwloc", online, node], capture_output=True, text=True, check=True)
    path = tmp_path / "topology.xml"
    path.write_text(done.stdout)
    return str(path)


def package_cpus(xml: str) -> list[int]:
    """The machine CPUs (os_index) of the PUs in the one package, in order."""
    (package,) = [o for o in ElementTree.parse(xml).getroot().iter("object") if o.get("type") == "Package"]
    return [int(pu.get("os_index")) for pu in package.iter("object") if pu.get("type") == "PU"]


@pytest.mark.parametrize(
    ("online", "node", "expected"),
    [
        ("0-3", "2-3", [2, 3]),
        ("0-1", "1", [1]),
        ("0-1", "0", [0]),
        ("0-3", "1,3", [1, 3]),
        ("0-63", "40-47", list(range(40, 48))),
    ],
)
def test_the_package_is_the_nodes_cpus(online, node, expected, tmp_path):
    xml = topology(online, node, tmp_path)
    assert package_cpus(xml) == expected
    # slurmd reads it without hwloc's complaints, and counts every host CPU (none is numbered
    # outside the package: Slurm's machine CPUs stay below its CPU count).
    done = subprocess.run(
        ["slurmd", "-C"],
        env={**os.environ, "HWLOC_XMLFILE": xml, "HWLOC_THISSYSTEM": "1"},
        capture_output=True,
        text=True,
        check=True,
    )
    total = sum(
        int(b) - int(a) + 1 for a, _, b in (p.partition("-") if "-" in p else (p, "", p) for p in online.split(","))
    )
    assert f"CPUs={total} Boards=1 SocketsPerBoard=1" in done.stdout, done.stdout
    assert "hwloc" not in done.stderr, done.stderr
