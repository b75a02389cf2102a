"""Typed config of the containers: the GPUs passed through (real or stand-in) and the node image."""

import re
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, PrivateAttr

from components.common.config_types import PackageName, SafeGlob, SafePath, StrictBool, StrictModel

# The most stand-in GPUs a host gets (the device list is built only for a count in range).
STAND_IN_MAX = 64

# MIG: the driver's capability devices (/proc/driver/nvidia-caps names them), kept at their
# path in a node (components/common/rendering.py: container_device_path), as MIG needs the directory.
MIG_CAPS_DIR = "/dev/nvidia-caps/"
MIG_CAP_NAME = re.compile(r"^nvidia-cap[0-9]+$")


def _mig_capability(path: str) -> str:
    name = path[len(MIG_CAPS_DIR) :] if path.startswith(MIG_CAPS_DIR) else None
    if name is not None and not MIG_CAP_NAME.match(name):
        raise ValueError(
            f"{path} is under {MIG_CAPS_DIR}, which holds only MIG capability devices (nvidia-cap<N>, "
            "e.g. /dev/nvidia-caps/nvidia-cap1: `ls /dev/nvidia-caps` on the host)"
        )
    return path


# A driver control device: nvidiactl, nvidia-uvm..., or a MIG capability device.
ControlDevice = Annotated[SafePath, AfterValidator(_mig_capability)]


class StandInGpus(StrictModel):
    """Stand-in GPUs for a machine without one: the program makes them and removes them."""

    count: int = Field(
        ge=1,
        le=STAND_IN_MAX,
        strict=True,
        description="character devices with NVIDIA's major 195 made in the cluster's private "
        "device directory (/run/gpucluster-<name>-dev/nvidia0..count-1, plus nvidiactl); they "
        "become gpu.devices and gpu.control_devices. Refused on a host with an NVIDIA driver",
    )


class GpuConfig(StrictModel):
    """GPU device nodes of the host, passed through to containers."""

    devices: list[SafePath] = Field(
        ["/dev/nvidia0"],
        description="one character device per GPU (major 195); gres.conf lists them by the "
        "same name inside the containers (/dev/<basename>)",
    )
    control_devices: list[ControlDevice] = Field(
        ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"],
        description="driver control devices bound into every container when present (absent ones are "
        "left out, no placeholder); the devices cgroup allows exactly these and the container's own "
        "GPUs, by their numbers on the host. With MIG add the capability devices "
        "(/dev/nvidia-caps/nvidia-cap<N>): a device under /dev keeps its path in the node",
    )
    stand_in: StandInGpus | None = Field(
        None,
        description="make stand-in devices instead of using real GPUs (leave devices and "
        "control_devices unset: they are the stand-ins)",
    )
    share_between_nodes: StrictBool = Field(
        False,
        description="removed: several nodes each claiming the same GPU as their own let Slurm start that "
        "many jobs that each believe they have the whole GPU, and no node can confine it. A GPU belongs "
        "to one node; jobs share it as Slurm shards (nodes[].gpu_shards). Only false is accepted",
    )
    cuda_path: SafePath | None = Field(
        "/usr/local/cuda",
        description="CUDA toolkit on the host, bound read-only at the same path when present",
    )
    driver_files: list[SafeGlob] = Field(
        [],
        description="driver user-space files (glob patterns) bound read-only into every node, an "
        "override: empty (the default), they are found on the host itself: NVIDIA's "
        "`nvidia-container-cli list` where the container toolkit is installed, else the host's "
        "loader cache (`ldconfig -p`: libcuda.so.1, libnvidia-ml.so.1, "
        "libnvidia-ptxjitcompiler.so.1, ... resolved to their real files) and nvidia-smi's real "
        "program (not a wrapper script). Libraries go into the node's library directory "
        "(/usr/lib/<arch>-linux-gnu) under their names, programs into /usr/bin; they must match "
        "the host's kernel module, so they are never copied",
    )


@dataclass(frozen=True)
class Release:
    """A Debian release a node image is built from, and the Slurm its archive ships: the
    Slurm files are rendered for that version (components/slurm/slurm_conf.py)."""

    debian: str
    slurm: tuple[int, int]
    # The image's packages: the same names in both archives so far (slurmd 22.05 / 24.11).
    packages: tuple[str, ...] = ("slurmd", "slurmctld", "slurm-client", "munge", "python3", "procps", "iproute2")


# Both boot their systemd on a cgroup v1 host without any setting: LXC mounts the container's
# hierarchies before init, and systemd 252 and 257 use what they find (257 boots, marking itself
# tainted "cgroupsv1"; no SYSTEMD_CGROUP_ENABLE_LEGACY_FORCE needed). A cgroup v2 host needs
# nothing either; systemd 258 and later (no v1 support) would need one (docs/gpu.md).
RELEASES = {
    "bookworm": Release(debian="12", slurm=(22, 5)),
    "trixie": Release(debian="13", slurm=(24, 11)),
}


class ImageConfig(StrictModel):
    """The node image every container is cloned from (built once, no per-node downloads)."""

    release: Literal["bookworm", "trixie"] = Field(
        "bookworm",
        description="Debian release of the nodes, which sets the cluster's Slurm: bookworm (Debian 12) "
        "has Slurm 22.05, trixie (Debian 13) Slurm 24.11. The Slurm files are rendered for that "
        "version; a change replaces the image and every node",
    )
    extra_packages: list[PackageName] = Field(
        [], description="packages added to the image besides slurmd, munge, slurm-client, python3"
    )
    keep: StrictBool = Field(
        True,
        description="keep the built image when the cluster is destroyed, in /var/cache/gpucluster/<name>/ "
        "(./purge-kept.sh removes it): the next up restores it instead of building it again, and another "
        "cluster of the host copies it (or the one in use) instead of building its own; an image of "
        "another release, package list or build script is never reused",
    )
    kept_max_age_days: int = Field(
        30,
        ge=1,
        le=3650,
        strict=True,
        description="a kept image older than this (days since it was built) is not restored but built "
        "again, with the mirror's current packages: nodes never start months-old packages",
    )

    # Enroot and Pyxis built in (the cluster's `containers:`; ClusterViews.node_image).
    _containers: bool = PrivateAttr(False)

    @property
    def containers(self) -> bool:
        return self._containers

    def with_containers(self) -> "ImageConfig":
        image = self.model_copy()
        image._containers = True
        return image

    @property
    def slurm_version(self) -> tuple[int, int]:
        return RELEASES[self.release].slurm

    @property
    def packages(self) -> tuple[str, ...]:
        return RELEASES[self.release].packages


def device_dir_of(run_dir: str, cluster: str) -> str:
    return f"{run_dir}/gpucluster-{cluster}-dev"


def stand_in_devices(device_dir: str, count: int) -> tuple[list[str], list[str]]:
    """The stand-in GPUs' paths (gpu.devices) and their control device (gpu.control_devices)."""
    return [f"{device_dir}/nvidia{i}" for i in range(count)], [f"{device_dir}/nvidiactl"]
