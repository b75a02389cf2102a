"""NodeImage: the Debian rootfs every container is cloned from, built once per cluster."""

import base64
import gzip
import hashlib
import io
import json
import os
import tarfile
from functools import cache
from pathlib import Path

import pulumi

from components.common.config_types import KEEP_DIR, ClusterIdentity
from components.common.options import child_options
from components.common.transport import Transport, env_list, host_command
from components.lxc.config import RELEASES, ImageConfig

FILES = Path(__file__).parent / "files"
# The files every node runs with beyond its packages, written into the image when it is built
# (and by slurmd's create into nodes of an older image): the helper that writes them, and the
# program of their timer, which removes what ended jobs left in /dev/shm and /tmp.
NODE_FILES_LIB = Path(__file__).parents[1] / "files" / "lib" / "node_files.sh"
JOB_FILES_REAPER_SOURCE = Path(__file__).parents[1] / "slurm" / "files" / "job_files_reaper.sh"
CONTAINERS_BUILD_LIB = Path(__file__).parents[1] / "files" / "lib" / "containers_build.sh"

# What every node, the controller and the web app need, so no container downloads packages
# (each release's names: RELEASES; bookworm's, for the tests that build a Debian 12 instance).
IMAGE_PACKAGES = list(RELEASES["bookworm"].packages)
# The host's cache of the image's packages (.debs and apt's lists), shared by its clusters
# and used when their image is kept: a name no cluster can have (purge-kept.sh --all removes it).
PACKAGE_CACHE = f"{KEEP_DIR}/node-packages"

# systemd units masked in the image: a node never uses them, and each one started costs every
# boot CPU (with 16 nodes booting at once, seconds). Nodes are reached with lxc-attach, never a
# login; their filesystems and packages are the host's and the image's concern.
MASKED_UNITS = [
    # logins and consoles
    "getty-static.service",
    "getty@.service",
    "console-getty.service",
    "container-getty@.service",
    "systemd-logind.service",
    "systemd-user-sessions.service",
    "systemd-update-utmp.service",
    "systemd-update-utmp-runlevel.service",
    "systemd-ask-password-wall.path",
    "systemd-ask-password-console.path",
    # periodic maintenance of packages and filesystems
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "dpkg-db-backup.timer",
    "e2scrub_all.timer",
    "e2scrub_reap.service",
    "fstrim.timer",
    # hardware and kernel facilities a container does not have
    "systemd-pstore.service",
    "systemd-journald-audit.socket",
    # /tmp as a tmpfs (trixie's default): what jobs write there would hold the node's memory,
    # unswappable; on the node's disk it does not (job_files_reaper.sh still cleans it)
    "tmp.mount",
]

# Jobs in container images (the cluster's `containers:`): what Enroot runs at a job's start
# (import, unpack, start) and curl's trusted CAs, in both releases' archives; Enroot and Pyxis
# themselves are built from their sources (containers_build.sh, CONTAINER_SOURCES).
CONTAINER_RUNTIME_PACKAGES = [
    *("squashfs-tools", "squashfuse", "fuse-overlayfs", "fuse3", "jq", "parallel", "curl"),
    *("ca-certificates", "zstd", "pigz", "bsdextrautils", "procps", "libcap2-bin"),
]
# Enroot's and Pyxis' unmodified release sources, where the engine's plugins' are
# (tools/pulumi-cli.sh): $PULUMI_PLUGIN_SOURCES, else shared/third_party beside or in the
# project. Debian packages neither.
ROOT = Path(__file__).resolve().parents[2]
CONTAINER_SOURCES = ("enroot-v4.1.2", "pyxis-v0.24.0")


def third_party() -> Path:
    candidates = [os.environ.get("PULUMI_PLUGIN_SOURCES", ""), ROOT.parent / "shared" / "third_party"]
    candidates.append(ROOT / "shared" / "third_party")
    for candidate in candidates:
        if candidate and all((Path(candidate) / folder).is_dir() for folder in CONTAINER_SOURCES):
            return Path(candidate)
    raise FileNotFoundError(
        f"containers: the sources of {' and '.join(CONTAINER_SOURCES)} are in none of "
        f"{', '.join(str(c) for c in candidates if c)} (shared/third_party, or $PULUMI_PLUGIN_SOURCES)"
    )


# Added since: in every image built from now on (disabled there: the metrics enable the node
# exporter per node), but no trigger, so an existing image and its clones are kept; a node of
# an older image installs it when the metrics need it.
LATER_PACKAGES = ["prometheus-node-exporter"]


class NodeImage(pulumi.ComponentResource):
    """A stopped LXC container `<cluster>-image` with slurmd, munge, slurm-client, python3.

    Builds `<name>-rootfs`: `lxc-create -t debian` once, prepared so that clones boot with
    static addresses and start no Slurm daemon until configured. Clones are overlay
    snapshots (`lxc-copy -s -B overlay`), so a node costs its boot, not an install.
    Changing the release or the packages replaces the image (and so every container);
    adding the containers (Enroot and Pyxis) does not: see image_fingerprint.

    With `image.keep` (the default), destroy moves the built image into the cluster's kept
    directory (one image per cluster, named by `image_digest`) and the next create moves it
    back instead of building it: a re-up costs the clones' boots, not an install. An image
    of another release, package list or build script has another digest and is never reused.
    """

    container: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        cluster: ClusterIdentity,
        image: ImageConfig,
        opts: pulumi.ResourceOptions | None = None,
        transport: Transport | None = None,
    ):
        super().__init__("gpu-cluster:lxc:NodeImage", name, None, opts)
        container = cluster.container_name("image")
        packages = image_packages(image)
        self.rootfs = host_command(
            f"{name}-rootfs",
            transport=transport,
            create=FILES / "image_create.sh",
            delete=FILES / "image_delete.sh",
            environment={
                "CLUSTER": cluster.name,
                "CLUSTER_DIR": cluster.cluster_dir,
                "IMAGE": container,
                "RELEASE": image.release,
                "PACKAGES": env_list(packages),
                "IMAGE_DIGEST": image_digest(image),
                "KEPT_DIR": cluster.kept_dir,
                "KEEP_ROOT": KEEP_DIR,
                "KEEP_IMAGE": "true" if image.keep else "false",
                "KEPT_MAX_AGE_DAYS": str(image.kept_max_age_days),
                "MASKED_UNITS": env_list(MASKED_UNITS),
                "PACKAGE_CACHE": PACKAGE_CACHE,
                # Written into the image with the rest of the node's own files (lib/node_files.sh).
                "JOB_FILES_REAPER": JOB_FILES_REAPER_SOURCE.read_text(),
                **container_build_environment(image),
            },
            triggers=image_fingerprint(image),
            # Same container name: the old image must go before the new one is built.
            opts=child_options(self, opts, delete_before_replace=True),
        )
        self.container = pulumi.Output.from_input(container)
        self.register_outputs({"container": self.container})


def image_packages(image: ImageConfig) -> list[str]:
    runtime = CONTAINER_RUNTIME_PACKAGES if image.containers else []
    return [*image.packages, *LATER_PACKAGES, *runtime, *image.extra_packages]


def image_fingerprint(image: ImageConfig) -> list[str]:
    """What the image is built from: a change replaces the image and every clone of it.
    LATER_PACKAGES apart, as they came without replacing anything; and the containers: an
    image without them is kept, its create builds them for its running nodes to install in
    place (containers_build.sh, containers_addon), so adding them keeps every job."""
    return [image.release, *image.packages, *image.extra_packages]


def container_build_environment(image: ImageConfig) -> dict[str, str]:
    """Enroot's and Pyxis' sources and build script, for an image with containers (nothing
    otherwise: an image without them keeps its inputs)."""
    if not image.containers:
        return {}
    return {"CONTAINER_SOURCES_TGZ": container_sources_archive()}


@cache
def container_sources_archive() -> str:
    """The sources as one gzipped tar in base64, the same bytes on every checkout (names
    sorted, no times, owners or modes but the executable bit), so a preview shows no change."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        sources = third_party()
        for folder in CONTAINER_SOURCES:
            for path in sorted((sources / folder).rglob("*")):
                if path.is_symlink() or not (path.is_file() or path.is_dir()):
                    continue
                info = tarfile.TarInfo(str(path.relative_to(sources)))
                info.mode = 0o755 if path.is_dir() or path.stat().st_mode & 0o100 else 0o644
                if path.is_dir():
                    info.type = tarfile.DIRTYPE
                    archive.addfile(info)
                else:
                    data = path.read_bytes()
                    info.size = len(data)
                    archive.addfile(info, io.BytesIO(data))
    return base64.b64encode(gzip.compress(buffer.getvalue(), compresslevel=9, mtime=0)).decode()


def image_digest(image: ImageConfig) -> str:
    """Names a built image by everything that shaped it: the release, the packages and the
    build script. A kept image is restored only under the same digest."""
    shaped_by = [image.release, *image_packages(image), (FILES / "image_create.sh").read_text()]
    shaped_by += [NODE_FILES_LIB.read_text(), JOB_FILES_REAPER_SOURCE.read_text()]
    if image.containers:
        shaped_by += [container_sources_archive(), CONTAINERS_BUILD_LIB.read_text()]
    shaped_by.append(MASKED_UNITS)
    return hashlib.sha256(json.dumps(shaped_by).encode()).hexdigest()[:16]
