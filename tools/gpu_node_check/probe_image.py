"""The container image of the GPU check's jobs in container images (slurm_check.sh): this
machine's python3, the interpreter of the acceptance probe (ops/verify_gpu.py), with its
standard library and the libraries it loads, and an os-release of its own, so a job shows it
ran in the image and not in its node. No CUDA and no driver: the node's Enroot hook binds the
host driver's files in, as it does for any image. Packed as a squashfs, which Pyxis takes by
its path (`srun --container-image=/path/probe.sqsh`), no registry needed."""

import os
import shutil
import subprocess
from pathlib import Path

OS_RELEASE = 'PRETTY_NAME="gpucluster GPU check image (python3)"\nNAME="gpucluster-check"\nID=gpucluster-check\n'
# The standard library less what the probe never imports (tests, GUIs, installers).
LEFT_OUT = ("test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "pydoc_data", "__pycache__", "config-*")
PYTHON = Path("/usr/bin/python3")


def _copy(path: str, root: Path) -> None:
    """`path` (a file, or a link: its target, at the link's path too) at the same path in `root`."""
    source = Path(path)
    target = root / source.relative_to("/")
    if target.exists():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(source.resolve(), target)


def _libraries(binary: Path) -> list[str]:
    """The shared libraries `binary` loads (ldd), the loader among them."""
    done = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=False)
    found = []
    for line in done.stdout.splitlines():
        words = line.split()
        if "=>" in words and len(words) > words.index("=>") + 1 and words[words.index("=>") + 1].startswith("/"):
            found.append(words[words.index("=>") + 1])
        elif words and words[0].startswith("/"):
            found.append(words[0])
    return found


def rootfs(root: Path) -> None:
    """The image's tree in `root` (empty or missing)."""
    binary = PYTHON.resolve()  # /usr/bin/python3.X
    stdlib = Path("/usr/lib") / binary.name
    for folder in ("bin", "etc", "root", "tmp", "proc", "sys", "dev", "run", "var/tmp", "usr/bin"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    (root / "tmp").chmod(0o1777)
    _copy(str(binary), root)
    (root / "usr" / "bin" / "python3").symlink_to(binary.name)
    shutil.copytree(
        stdlib,
        root / stdlib.relative_to("/"),
        ignore=shutil.ignore_patterns(*LEFT_OUT, "site-packages", "dist-packages"),
        symlinks=True,
    )
    for binary_or_module in [binary, *(root / stdlib.relative_to("/") / "lib-dynload").glob("*.so")]:
        for library in _libraries(binary_or_module):
            _copy(library, root)
    (root / "etc" / "os-release").write_text(OS_RELEASE)
    (root / "etc" / "passwd").write_text("root:x:0:0:root:/root:/usr/bin/python3\n")
    (root / "etc" / "group").write_text("root:x:0:\n")
    # Where the driver hook binds libcuda and libnvidia-ml (the node's library directory).
    (root / "etc" / "ld.so.conf").write_text("/usr/lib/x86_64-linux-gnu\n/lib/x86_64-linux-gnu\n")
    for name in ("hosts", "resolv.conf"):
        (root / "etc" / name).write_text("")


def squash(root: Path, image: Path, mksquashfs: list[str]) -> None:
    """`root` as a squashfs at `image`, every file root's (as an image pulled from a registry)."""
    image.unlink(missing_ok=True)
    subprocess.run(
        [*mksquashfs, str(root), str(image), "-noappend", "-all-root", "-comp", "xz", "-quiet"],
        check=True,
        capture_output=True,
        env={**os.environ},
    )
