"""LoginNode: a container where the cluster's people log in over SSH and submit jobs."""

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
from components.slurm.config import LoginConfig

FILES = Path(__file__).parent / "files"


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
        + "AuthorizedKeysFile .ssh/authorized_keys\n"
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

    slurm_conf: str
    """The cluster's rendered slurm.conf, written to /etc/slurm/slurm.conf."""
    after: tuple[pulumi.Resource, ...]
    """What its setup waits for: slurmctld (munge key, a controller to submit to)."""


class LoginNode(pulumi.ComponentResource):
    """A login node: a clone of the node image without GPUs, where `users[]` log in with their
    `ssh_keys` (reached through a host port forward made beside it) and submit jobs.

    Builds:
      - `<name>-container`: a CudaContainer on the NAT bridge, no GPU, `shared_dir` bound at
        its path, the people made in it (with homes).
      - `<name>-setup`: munge with the cluster's key, slurm.conf as a file (updated when it
        changes: a Slurm client without slurmd has no configless mode), key-only sshd enabled
        (no password, no root, only people with a key; host keys its own), each person's
        `~/.ssh/authorized_keys` (theirs, 0600, in a 0700 directory), and `<shared_dir>/<name>`
        for each person, theirs and 0700, made when missing and kept on destroy.
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
            ContainerSpec(hostname=login.name, nat_address=login.nat_address, cluster_address=None, gpu_devices=[]),
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
                "SHARED_DIR": platform.shared_dir,
                # On the host: the record outlives a replaced login container.
                "SHARED_DIRS_MADE": f"{cluster.cluster_dir}/login/shared-dirs-made",
                "SSHD_CONFIG": render_sshd_config(platform.users),
                "PEOPLE": render_people(platform.users),
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
