"""The node image one test cluster's destroy kept, lent to another test cluster built from the
same image definition: its bring-up restores the image instead of building it (a download and
an install), and the image goes back to its owner after the borrower's destroy kept it.

A kept image is the image's LXC directory; its config names the directory it was built in
(rootfs path, uts name), so a move between clusters rewrites those two names.
"""

import contextlib
import shutil
from pathlib import Path

from tests.harness.command_executor import HostCommand

LXC_PATH = "/var/lib/lxc"
READY = "gpucluster-image-ready"


def _kept(commands: list[HostCommand], cluster: str) -> tuple[Path, Path]:
    """(where `cluster` keeps this image, where the commands' own cluster keeps it)."""
    image = next(c for c in commands if c.name.endswith("-image-rootfs")).environment
    name = f"node-image-{image['IMAGE_DIGEST']}"
    own = Path(image["KEPT_DIR"]) / name
    return own.parent.parent / cluster / name, own


def _move(source: Path, target: Path, old: str, new: str) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(source, target)
    config = target / "config"
    config.write_text(
        config.read_text()
        .replace(f"{LXC_PATH}/{old}-image/", f"{LXC_PATH}/{new}-image/")
        .replace(f"lxc.uts.name = {old}-image\n", f"lxc.uts.name = {new}-image\n")
    )
    with contextlib.suppress(OSError):
        source.parent.rmdir()


@contextlib.contextmanager
def lent_image(owner: str, commands: list[HostCommand]):
    """Within: the commands' cluster restores `owner`'s kept image, if there is one and it has
    none of its own; after: the image it kept again goes back to `owner`."""
    borrower = next(c for c in commands if c.name.endswith("-image-rootfs")).environment["CLUSTER"]
    owners, own = _kept(commands, owner)
    lent = (owners / READY).exists() and not own.exists()
    if lent:
        _move(owners, own, owner, borrower)
    try:
        yield lent
    finally:
        if lent and (own / READY).exists() and not owners.exists():
            _move(own, owners, borrower, owner)
