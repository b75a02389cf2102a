"""The driver's user-space files found on the host itself (components/files/lib/gpu_driver.sh)
and bound where a node's loader and PATH find them (container_create.sh), for the two common
layouts: Debian's multiarch directory and /usr/local/nvidia (GPU container hosts, where
/usr/bin/nvidia-smi is a wrapper script). The host's `ldconfig -p` and NVIDIA's
`nvidia-container-cli` are fakes listing a fake driver's files under a temporary root."""

import os
import subprocess
from pathlib import Path

import pytest

from components.common.transport import INTERPRETER, script
from components.lxc.cuda_container import FILES
from tests.lxc.driver_layouts import LAYOUTS, VERSION, install, install_container_cli
from tests.lxc.driver_layouts import discover as run_discovery
from tests.lxc.test_container_script import script_environment

LIBDIR = "/usr/lib/x86_64-linux-gnu"
pytestmark = pytest.mark.skipif(os.uname().machine != "x86_64", reason="the fake layouts are x86_64's")


def discover(root: Path, tools: Path, driver_files: str = "") -> tuple[str, list[str]]:
    """(how the files were found, the `HOST_FILE NODE_PATH` lines with the root as ROOT)."""
    # The host's PATH has /usr/bin (where the wrapper of the /usr/local/nvidia layout lives).
    done = run_discovery(tools, f"{root}/usr/bin:", driver_files)
    assert done.returncode == 0, done.stderr
    method, *mounts = done.stdout.replace(str(root), "ROOT").splitlines()
    return method, mounts


def expected_libraries(layout: str) -> list[str]:
    libdir = LAYOUTS[layout][0]
    return [
        f"ROOT/{libdir}/{stem}.so.{VERSION} {LIBDIR}/{stem}.so.1"
        for stem in ("libcuda", "libnvidia-ml", "libnvidia-ptxjitcompiler")
    ]


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_the_loader_cache_names_the_drivers_real_files_in_either_layout(tmp_path, layout):
    tools = install(tmp_path, layout)
    method, mounts = discover(tmp_path, tools)
    assert method == "ldconfig -p"
    # Real files (not the soname links), bound under their sonames into the node's library
    # directory; the 32-bit libcuda is left out; the real nvidia-smi, never the wrapper.
    bindir = LAYOUTS[layout][1]
    assert mounts == [*expected_libraries(layout), f"ROOT/{bindir}/nvidia-smi /usr/bin/nvidia-smi"]


def test_a_wrapper_script_on_path_is_followed_to_the_real_nvidia_smi(tmp_path):
    tools = install(tmp_path, "usr-local-nvidia")
    assert (tmp_path / "usr/bin/nvidia-smi").read_text().startswith("#!")
    _, mounts = discover(tmp_path, tools)
    assert "ROOT/usr/local/nvidia/bin/nvidia-smi /usr/bin/nvidia-smi" in mounts
    assert not [line for line in mounts if line.startswith("ROOT/usr/bin/")]


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_nvidia_container_cli_is_preferred_where_installed(tmp_path, layout):
    tools = install(tmp_path, layout)
    install_container_cli(tmp_path, layout)
    method, mounts = discover(tmp_path, tools)
    assert method == "nvidia-container-cli list"
    libdir, bindir = LAYOUTS[layout]
    # Its own list (one library more than the loader cache's), under the sonames the cache
    # knows; a library the cache does not know keeps its name (the node's ldconfig links it).
    assert mounts == [
        *expected_libraries(layout),
        f"ROOT/{libdir}/libnvidia-gpucomp.so.{VERSION} {LIBDIR}/libnvidia-gpucomp.so.{VERSION}",
        f"ROOT/{bindir}/nvidia-smi /usr/bin/nvidia-smi",
    ]


def test_gpu_driver_files_stays_an_override(tmp_path):
    tools = install(tmp_path, "usr-local-nvidia")
    install_container_cli(tmp_path, "usr-local-nvidia")
    method, mounts = discover(
        tmp_path, tools, f"{tmp_path}/usr/local/nvidia/lib64/libcuda.so.1\n{tmp_path}/usr/local/nvidia/bin/nvidia-smi"
    )
    assert method == "gpu.driver_files"
    assert mounts == [
        f"ROOT/usr/local/nvidia/lib64/libcuda.so.1 {LIBDIR}/libcuda.so.1",
        "ROOT/usr/local/nvidia/bin/nvidia-smi /usr/bin/nvidia-smi",
    ]


def test_a_host_without_a_driver_finds_nothing(tmp_path):
    tools = tmp_path / "fake-bin"
    tools.mkdir()
    (tools / "ldconfig").write_text("#!/bin/sh\necho '0 libs found in cache'\n")
    (tools / "ldconfig").chmod(0o755)
    method, mounts = discover(tmp_path, tools)
    assert (method, mounts) == ("ldconfig -p", [])


# ---- the container script: what it writes into a node's config ----


def write_config(tmp_path: Path, tools: Path | None, old_config: str | None = None, **changes: str):
    """Run container_create.sh on a container directory of this test's own LXC path (an
    overlay clone's config, no rootfs): lxc-start fails on it, so the script stops right after
    writing the config (and cleaning the stopped clone). Returns (the run, the config lines,
    the clone's writable layer)."""
    lxc_path = tmp_path / "lxc"
    container = lxc_path / "cst-c000"
    upper, lower = container / "delta0", tmp_path / "image-rootfs"
    (lower / "etc").mkdir(parents=True, exist_ok=True)
    (lower / "etc/hosts").write_text("127.0.1.1\timage\n")
    upper.mkdir(parents=True, exist_ok=True)
    (container / "config").write_text(f"lxc.rootfs.path = overlay:{lower}:{upper}\n")
    (container / "gpucluster-owner").write_text("cst\n")
    if old_config is not None:
        (container / "gpucluster.conf").write_text(old_config)
    text = script(FILES / "container_create.sh")
    if tools is not None:
        marker = "# ---- container_create.sh ----\n"
        text = text.replace(marker, f'{marker}PATH="{tools}:{tmp_path}/usr/bin:$PATH"\n')
    done = subprocess.run(
        [*INTERPRETER, text],
        env=script_environment(tmp_path, lxc_path, **changes),
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode != 0 and "lxc-start" in done.stderr, done.stderr
    return done, (container / "gpucluster.conf").read_text().splitlines(), upper


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_a_node_gets_the_driver_in_its_library_directory_and_nvidia_smi_on_its_path(tmp_path, layout):
    tools = install(tmp_path, layout)
    _, config, _ = write_config(tmp_path, tools)
    mounts = [line.replace(str(tmp_path), "ROOT") for line in config if line.startswith("lxc.mount.entry = ")]
    libdir, bindir = LAYOUTS[layout]
    assert mounts == [
        *(
            f"lxc.mount.entry = ROOT/{libdir}/{stem}.so.{VERSION} {LIBDIR[1:]}/{stem}.so.1 "
            "none bind,ro,optional,create=file 0 0"
            for stem in ("libcuda", "libnvidia-ml", "libnvidia-ptxjitcompiler")
        ),
        f"lxc.mount.entry = ROOT/{bindir}/nvidia-smi usr/bin/nvidia-smi none bind,ro,optional,create=file 0 0",
    ]


def test_a_driver_change_leaves_no_stale_placeholder_in_the_clone(tmp_path):
    """The clone was last started with the driver bound at its host paths (the old layout):
    LXC left empty files there in the writable layer. Now bound elsewhere, they go; a file a
    job wrote (not empty) and the new targets' files stay."""
    tools = install(tmp_path, "usr-local-nvidia")
    old_targets = ["usr/local/nvidia/lib64/libcuda.so.1", "usr/bin/nvidia-smi-old", "opt/kept/notes"]
    old = "".join(
        f"lxc.mount.entry = /x/{t.rsplit('/', 1)[1]} {t} none bind,ro,optional,create=file 0 0\n" for t in old_targets
    )
    old += "lxc.mount.entry = /usr/bin/nvidia-smi usr/bin/nvidia-smi none bind,ro,optional,create=file 0 0\n"
    upper = tmp_path / "lxc/cst-c000/delta0"
    for target in [*old_targets, "usr/bin/nvidia-smi"]:
        (upper / target).parent.mkdir(parents=True, exist_ok=True)
        (upper / target).write_text("")
        (upper / target).chmod(0)
    (upper / "opt/kept/notes").write_text("a job's notes\n")
    done, _, upper = write_config(tmp_path, tools, old_config=old)
    assert not (upper / "usr/local/nvidia/lib64/libcuda.so.1").exists()
    assert not (upper / "usr/bin/nvidia-smi-old").exists()
    assert (upper / "opt/kept/notes").read_text() == "a job's notes\n"
    # Still a target of the new config: LXC binds over it at the next start.
    assert (upper / "usr/bin/nvidia-smi").exists()
    assert "removed the stale bind placeholder /usr/local/nvidia/lib64/libcuda.so.1" in done.stderr


def test_an_absent_optional_device_is_not_bound(tmp_path):
    present = tmp_path / "nvidiactl"
    present.write_text("")
    lines = (
        f"lxc.mount.entry = {present} dev/nvidiactl none bind,optional,create=file 0 0\n"
        f"lxc.mount.entry = {tmp_path}/nvidia-modeset dev/nvidia-modeset none bind,optional,create=file 0 0\n"
        f"lxc.mount.entry = {tmp_path}/shared {tmp_path.relative_to('/')}/shared none bind,create=dir 0 0"
    )
    _, config, _ = write_config(tmp_path, None, LXC_CONFIG=lines)
    mounts = [line for line in config if line.startswith("lxc.mount.entry")]
    assert mounts == [lines.splitlines()[0], lines.splitlines()[2]]
    assert f"# absent on this host, not bound: {tmp_path}/nvidia-modeset" in config
