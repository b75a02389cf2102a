"""CudaContainer: one LXC container cloned from the node image, with the host's GPUs."""

from dataclasses import dataclass
from pathlib import Path

import pulumi

from components.common.config_types import ClusterIdentity
from components.common.options import child_options
from components.common.transport import Transport, env_list, host_command
from components.host.config import UserConfig
from components.lxc.config import GpuConfig, ImageConfig
from components.lxc.lxc_conf import ContainerSpec, container_devices, render_lxc_config
from components.lxc.node_image import image_fingerprint
from components.network.config import NetworkConfig

FILES = Path(__file__).parent / "files"
# Whom users_create.sh made in a container (only those are ever removed).
USERS_RECORD = "/etc/gpucluster/users-made"


@dataclass(frozen=True)
class ContainerPlatform:
    """What every container of a cluster is built on: bridges, GPU settings, image, shared dir."""

    network: NetworkConfig
    gpu: GpuConfig
    image: ImageConfig
    shared_dir: str
    users: tuple[UserConfig, ...] = ()


class CudaContainer(pulumi.ComponentResource):
    """A privileged LXC 5 container on the cluster's bridges with GPU device pass-through.

    Builds `<name>-lxc`: an overlay clone of the node image; veth on the NAT bridge and
    macvlan on the cluster bridge with static addresses; its own GPU device nodes and the
    driver's control devices bound in, with cgroup v1 and v2 allow rules for exactly those
    devices (their major:minor read on the host; other GPUs cannot be opened); CUDA and
    driver files bound read-only when the host has them; the shared directory at the same
    path; a node's cpuset is `cpus` host CPUs dealt in turn (lxc_conf.cpu_slots); root login by password disabled.
    Privileged, with the confinement described in components/lxc/lxc_conf.py; with an id map
    (`spec.id_map`: the login node) an unprivileged full copy of the image instead, its files
    owned by the namespace's host ids, no GPU, driver file or CUDA bound in. The create script
    is safe to run for many containers at once.

    With people in the platform, `<name>-users` makes them in the container with the same
    names, uids and gids as on the host (set up again in a replaced container).
    """

    container: pulumi.Output[str]
    nat_address: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        cluster: ClusterIdentity,
        spec: ContainerSpec,
        platform: ContainerPlatform,
        image: pulumi.Resource,
        opts: pulumi.ResourceOptions | None = None,
        transport: Transport | None = None,
    ):
        super().__init__("gpu-cluster:lxc:CudaContainer", name, None, opts)
        container = cluster.container_name(spec.hostname)
        lxc_config = render_lxc_config(spec, platform.network, platform.gpu, platform.shared_dir, container)
        self.lxc = host_command(
            f"{name}-lxc",
            transport=transport,
            create=FILES / "container_create.sh",
            # A config change runs the create again: it rewrites the config and restarts.
            delete=FILES / "container_delete.sh",
            environment={
                "CLUSTER": cluster.name,
                "CLUSTER_DIR": cluster.cluster_dir,
                "IMAGE": cluster.container_name("image"),
                "CONTAINER": container,
                "NODE_HOSTNAME": spec.hostname,
                "LXC_CONFIG": lxc_config,
                "NAT_ADDRESS": str(spec.nat_address),
                # Allowed in the devices cgroup by their host numbers, known only on the host.
                "DEVICES": env_list(container_devices(spec, platform.gpu)),
                "DRIVER_FILES": "" if spec.id_map else env_list(platform.gpu.driver_files),
                "SHARED_DIR": platform.shared_dir,
                # A node's cpuset (SLOT,COUNT in the host's online CPU list), known only on the host.
                "CPUSET": f"{spec.cpu_slot},{spec.cpus}" if spec.cpus is not None else "",
                # Its memory limit in MB (a node's share of its host is known once that is measured).
                "MEMORY_MB": pulumi.Output.from_input(spec.memory_mb).apply(lambda mb: "" if mb is None else str(mb)),
            },
            # A new image means a new clone; the name and addresses are reused, so the old clone
            # goes first. The fingerprint is read through the image resource (the same value): a
            # property dependency puts the clone in the engine's delete-before-replace chain of
            # the image, after whatever is replaced with the image (`lives_on`), which therefore
            # still finds its old container (replace_with does not reach through two links).
            # An unprivileged container is a copy whose files belong to its namespace's ids, never a
            # privileged clone changed in place: going from one to the other makes a new one.
            triggers=image.id.apply(
                lambda _: [*image_fingerprint(platform.image), *(["unprivileged"] if spec.id_map else [])]
            ),
            # Moved to another host: made there after the old one is gone from its host.
            placed=True,
            opts=child_options(self, opts, delete_before_replace=True),
        )
        self.lives_on: list[pulumi.Resource] = [self.lxc, image]
        """What a command living in this container is replaced with (`replace_with`), so that
        its delete runs before the old container goes: the clone, and the image it overlays."""
        if platform.users:
            self.users = host_command(
                f"{name}-users",
                transport=transport,
                create=FILES / "users_create.sh",
                delete=FILES / "users_delete.sh",
                environment={
                    "CONTAINER": container,
                    "USERS": env_list(user.spec for user in platform.users),
                    "USERS_RECORD": USERS_RECORD,
                },
                opts=child_options(self, opts, self.lxc, replace_with=[self.lxc]),
            )
        self.container = pulumi.Output.from_input(container)
        self.nat_address = pulumi.Output.from_input(str(spec.nat_address))
        # Not the LXC config: the `-lxc` command's inputs hold it already (the script store
        # names it), and the state, written whole at every step, would keep it twice.
        self.register_outputs({"container": self.container, "nat_address": self.nat_address})
