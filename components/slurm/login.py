"""LoginNode: a container where the cluster's people log in over SSH and submit jobs."""

import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pulumi

from components.common.config_types import ClusterIdentity
from components.common.options import child_options
from components.common.rendering import HEADER
from components.common.transport import Transport, env_list, host_command
from components.host.config import UserConfig
from components.lxc.cuda_container import ContainerPlatform, CudaContainer
from components.lxc.lxc_conf import ContainerSpec
from components.slurm.config import LOGIN_ID_RANGE, LoginConfig

FILES = Path(__file__).parent / "files"
# Where sshd reads a person's keys: root's files, never a path in a person's home (which they
# own, and could turn into a link to anything for root to follow).
AUTHORIZED_KEYS_DIR = "/etc/ssh/authorized_keys"
# The kernel takes at most this many lines in a user namespace's uid_map (and gid_map).
ID_MAP_MAX_LINES = 340


def login_host_id_base(cluster: str, login: LoginConfig) -> int:
    """The first host id of the login node's namespace: the configured one, else one of 4096
    ranges picked by the cluster's name (two clusters on a host get two, but for a clash of
    names' checksums: then set login.host_id_base)."""
    if login.host_id_base is not None:
        return login.host_id_base
    return 1_000_000 + (zlib.crc32(cluster.encode()) % 4096) * LOGIN_ID_RANGE


def id_map_ranges(kept: Iterable[int], base: int) -> list[tuple[int, int, int]]:
    """(first container id, first host id, count) covering container ids 0..LOGIN_ID_RANGE-1:
    the ids in `kept` are the same on the host (a person's files in shared_dir have one owner
    everywhere), every other id is base + id (root and the system users: no host id of note)."""
    kept = set(kept)
    ranges: list[tuple[int, int, int]] = []
    for first in range(LOGIN_ID_RANGE):
        host = first if first in kept else base + first
        if ranges and ranges[-1][0] + ranges[-1][2] == first and ranges[-1][1] + ranges[-1][2] == host:
            ranges[-1] = (ranges[-1][0], ranges[-1][1], ranges[-1][2] + 1)
        else:
            ranges.append((first, host, 1))
    return ranges


def login_id_map(users: tuple[UserConfig, ...], base: int) -> tuple[tuple[str, int, int, int], ...]:
    """The login node's user namespace: the people keep their uids and gids, the rest is base + id."""
    uids = id_map_ranges({user.uid for user in users}, base)
    gids = id_map_ranges({user.gid for user in users}, base)
    return tuple(("u", *r) for r in uids) + tuple(("g", *r) for r in gids)


def render_sshd_config(users: tuple[UserConfig, ...]) -> str:
    """The login node's sshd drop-in: keys only, never root, only the people with a key.
    Debian's sshd_config includes sshd_config.d/ first, and sshd keeps a setting's first value."""
    allowed = " ".join(user.name for user in users if user.ssh_keys)
    return (
        HEADER
        + "PasswordAuthentication no\n"
        + "KbdInteractiveAuthentication no\n"
        + "PermitRootLogin no\n"
        + "PubkeyAuthentication yes\n"
        + f"AuthorizedKeysFile {AUTHORIZED_KEYS_DIR}/%u\n"
        + "X11Forwarding no\n"
        + f"AllowUsers {allowed}\n"
    )


def render_people(users: tuple[UserConfig, ...]) -> str:
    """PEOPLE as login_create.sh reads it: a person's spec, then each of their keys on a line
    of its own after one space."""
    return env_list(line for user in users for line in [user.spec, *(f" {key}" for key in user.ssh_keys)])


@dataclass(frozen=True)
class LoginSetup:
    """What the login node takes of the rest of the cluster."""

    slurm_conf: pulumi.Input[str]
    """The cluster's rendered slurm.conf, written to /etc/slurm/slurm.conf."""
    cpu_slot: int
    """Where its CPUs start in its host's online CPU list: after the nodes' (lxc_conf.cpu_slots)."""
    after: tuple[pulumi.Resource, ...]
    """What its setup waits for: slurmctld (munge key, a controller to submit to)."""
    plugstack_conf: str | None = None
    """Pyxis' plugstack.conf, with jobs in container images (components/containers)."""


class LoginNode(pulumi.ComponentResource):
    """A login node: a clone of the node image without GPUs, where `users[]` log in with their
    `ssh_keys` (reached through a host port forward made beside it) and submit jobs.

    Builds:
      - `<name>-container`: a CudaContainer on the NAT bridge, no GPU, `shared_dir` bound at
        its path, the people made in it (with homes). Unprivileged: a user namespace whose
        root and system users are host ids from `login_host_id_base` on, while the people
        keep their uids and gids (their files in shared_dir have one owner everywhere); its
        own CPUs (after its host's nodes') and memory limit (`login.cpus`, `login.memory_mb`).
      - `<name>-setup`: munge with the cluster's key, slurm.conf as a file (updated when it
        changes: a Slurm client without slurmd has no configless mode), key-only sshd enabled
        (no password, no root, only people with a key; host keys its own), each person's keys
        in `AUTHORIZED_KEYS_DIR/<name>` (root's, 0644: nothing in a person's home is read or
        touched by root), and `<shared_dir>/<name>` for each person, theirs and 0700, made by
        the host's root when missing (never through a link) and kept on destroy.
    No Slurm daemon runs in it: slurmd and slurmctld stay disabled as in the image.
    """

    container: pulumi.Output[str]
    address: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        cluster: ClusterIdentity,
        login: LoginConfig,
        platform: ContainerPlatform,
        setup: LoginSetup,
        image: pulumi.Resource,
        opts: pulumi.ResourceOptions | None = None,
        transport: Transport | None = None,
    ):
        super().__init__("gpu-cluster:slurm:LoginNode", name, None, opts)
        container = cluster.container_name(login.name)
        self.container_resource = CudaContainer(
            f"{name}-container",
            cluster,
            ContainerSpec(
                hostname=login.name,
                nat_address=login.nat_address,
                cluster_address=None,
                gpu_devices=[],
                cpus=login.cpus,
                cpu_slot=setup.cpu_slot,
                memory_mb=login.memory_mb,
                id_map=login_id_map(platform.users, login_host_id_base(cluster.name, login)),
            ),
            platform,
            image=image,
            opts=child_options(self, opts),
            transport=transport,
        )
        people = [self.container_resource.users] if platform.users else []
        self.setup = host_command(
            f"{name}-setup",
            transport=transport,
            create=FILES / "login_create.sh",
            delete=FILES / "login_delete.sh",
            environment={
                "CLUSTER": cluster.name,
                "CONTAINER": container,
                "MUNGE_KEY_FILE": f"{cluster.cluster_dir}/munge.key",
                "MUNGE_SOCKET": cluster.munge_socket,
                "SLURM_CONF_TEXT": setup.slurm_conf,
                # Added only when used: a cluster without it keeps its inputs. IMAGE: where a
                # login node of an image without Pyxis finds its build (lib/containers_addon.sh).
                **(
                    {"PLUGSTACK_CONF_TEXT": setup.plugstack_conf, "IMAGE": cluster.container_name("image")}
                    if setup.plugstack_conf
                    else {}
                ),
                "SHARED_DIR": platform.shared_dir,
                # On the host: the record outlives a replaced login container.
                "SHARED_DIRS_MADE": f"{cluster.cluster_dir}/login/shared-dirs-made",
                "SSHD_CONFIG": render_sshd_config(platform.users),
                "PEOPLE": render_people(platform.users),
                "AUTHORIZED_KEYS_DIR": AUTHORIZED_KEYS_DIR,
            },
            opts=child_options(
                self,
                opts,
                self.container_resource,
                *people,
                *setup.after,
                replace_with=[self.container_resource.lxc],
            ),
        )
        self.container = pulumi.Output.from_input(container)
        self.address = pulumi.Output.from_input(str(login.nat_address))
        self.register_outputs({"container": self.container, "address": self.address})
