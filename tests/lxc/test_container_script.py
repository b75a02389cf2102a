"""The container script's handling of host file names matched by gpu.driver_files: a name
that an LXC config line cannot hold stops the script before anything changes."""

import os
import subprocess
from pathlib import Path

from components.lxc.cuda_container import FILES
from components.transport import INTERPRETER, script

CREATE = script(FILES / "container_create.sh")


def run_create(tmp_path: Path, pattern: str) -> subprocess.CompletedProcess:
    environment = {
        "CLUSTER": "cst",
        "CLUSTER_DIR": str(tmp_path / "state"),
        "DEVICES": "",
        "IMAGE": "cst-image-absent",
        "CONTAINER": "cst-c000-absent",
        "NODE_HOSTNAME": "c000",
        "LXC_CONFIG": "",
        "NAT_ADDRESS": "10.98.3.2",
        "DRIVER_FILES": pattern,
        "SHARED_DIR": str(tmp_path / "shared"),
    }
    return subprocess.run(
        [*INTERPRETER, CREATE],
        env={"PATH": os.environ["PATH"], **environment},
        capture_output=True,
        text=True,
        check=False,
    )


def test_a_driver_file_name_with_a_newline_never_becomes_a_config_line(tmp_path):
    drivers = tmp_path / "drivers"
    drivers.mkdir()
    (drivers / "libcuda.so.1\nlxc.mount.auto = proc:rw sys:rw").write_text("")
    done = run_create(tmp_path, f"{drivers}/libcuda.so*")
    assert done.returncode == 1
    assert "has characters an LXC config line cannot hold" in done.stderr
    assert "gpu.driver_files" in done.stderr
    # Refused before anything changed: no container, no shared directory.
    assert not (tmp_path / "shared").exists()
    assert not Path("/var/lib/lxc/cst-c000-absent").exists()


def test_safe_driver_file_names_pass_the_check(tmp_path):
    drivers = tmp_path / "drivers"
    drivers.mkdir()
    (drivers / "libcuda.so.1").write_text("")
    done = run_create(tmp_path, f"{drivers}/libcuda.so*")
    # Past the driver files, the script stops at the missing image (nothing to clone).
    assert done.returncode == 1
    assert "node image cst-image-absent is missing" in done.stderr
