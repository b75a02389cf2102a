"""Fake NVIDIA driver installs for the driver discovery tests: the files of a driver in one of
the two common layouts under a temporary root, a fake `ldconfig -p` that lists them the way
the real one does, and a fake `nvidia-container-cli`."""

import os
import stat
import subprocess
from pathlib import Path

from components.common.transport import INTERPRETER, helpers

VERSION = "580.159.04"
# The bytes a real library or program starts with: what tells a program from a wrapper script.
ELF = b"\x7fELF\x02\x01\x01" + bytes(9)

LIBRARIES = ("libcuda", "libnvidia-ml", "libnvidia-ptxjitcompiler")
# (library directory, program directory) of each layout, relative to the root.
LAYOUTS = {
    "debian-multiarch": ("usr/lib/x86_64-linux-gnu", "usr/bin"),
    "usr-local-nvidia": ("usr/local/nvidia/lib64", "usr/local/nvidia/bin"),
}


def executable(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def install(root: Path, layout: str) -> Path:
    """A driver's files in `layout` under `root` and a fake `ldconfig` listing them; returns
    the directory of fake tools (put first on PATH)."""
    libdir, bindir = (root / part for part in LAYOUTS[layout])
    libdir.mkdir(parents=True, exist_ok=True)
    entries = []
    for stem in LIBRARIES:
        real = libdir / f"{stem}.so.{VERSION}"
        real.write_bytes(ELF)
        (libdir / f"{stem}.so.1").symlink_to(real.name)
        # Some entries carry an OS ABI in their flags, as the real ldconfig prints it.
        flags = "libc6,x86-64, OS ABI: Linux 3.10.0" if stem == "libnvidia-ml" else "libc6,x86-64"
        entries.append(f"\t{stem}.so.1 ({flags}) => {libdir}/{stem}.so.1")
    # A 32-bit libcuda (Debian's libcuda1:i386): never a 64-bit node's.
    i386 = root / "usr/lib/i386-linux-gnu"
    i386.mkdir(parents=True, exist_ok=True)
    (i386 / "libcuda.so.1").write_bytes(ELF)
    entries.insert(0, f"\tlibcuda.so.1 (libc6) => {i386}/libcuda.so.1")
    smi = bindir / "nvidia-smi"
    smi.parent.mkdir(parents=True, exist_ok=True)
    smi.write_bytes(ELF)
    smi.chmod(0o755)
    if layout == "usr-local-nvidia":
        # The GPU container hosts' /usr/bin/nvidia-smi: a wrapper script, not the program.
        executable(root / "usr/bin/nvidia-smi", f'#!/bin/sh\nexec {smi} "$@"\n')
    tools = root / "fake-bin"
    header = [
        f"{len(entries) + 1} libs found in cache `/etc/ld.so.cache'",
        "\tlibc.so.6 (libc6,x86-64) => /lib/libc.so.6",
    ]
    listing = "\n".join([*header, *entries])
    executable(tools / "ldconfig", f"#!/bin/sh\n[ \"$1\" = -p ] || exit 0\ncat <<'EOF'\n{listing}\nEOF\n")
    return tools


def install_container_cli(root: Path, layout: str) -> None:
    """A fake `nvidia-container-cli` listing the layout's files as the real one does (real files,
    versioned names; one more library the loader cache does not know)."""
    libdir, bindir = (root / part for part in LAYOUTS[layout])
    extra = libdir / f"libnvidia-gpucomp.so.{VERSION}"
    extra.write_bytes(ELF)
    libraries = "\n".join([*(f"{libdir}/{stem}.so.{VERSION}" for stem in LIBRARIES), str(extra)])
    executable(
        root / "fake-bin/nvidia-container-cli",
        "#!/bin/sh\n"
        '[ "$1" = list ] || exit 1\n'
        f'case "$2" in\n  --libraries) printf "%s\\n" {" ".join(libraries.split())} ;;\n'
        f'  --binaries) printf "%s\\n" {bindir}/nvidia-smi ;;\n'
        f'  *) printf "%s\\n" /dev/nvidiactl {bindir}/nvidia-smi {" ".join(libraries.split())} ;;\nesac\n',
    )


def discover(tools: Path, extra_path: str = "", driver_files: str = "") -> subprocess.CompletedProcess:
    """gpu_driver_mounts (components/files/lib/gpu_driver.sh) with the fake tools first on PATH."""
    text = (
        helpers(["core.sh", "gpu_driver.sh"])
        + f'PATH="{tools}:{extra_path}$PATH"\ngpu_driver_method\ngpu_driver_mounts\n'
    )
    return subprocess.run(
        [*INTERPRETER, text],
        env={"PATH": os.environ["PATH"], "DRIVER_FILES": driver_files},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
