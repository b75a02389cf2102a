"""SlurmController: the cluster's munge key, slurmctld, and Slurm client access from the host."""

from dataclasses import dataclass
from ipaddress import IPv4Address
from pathlib import Path

import pulumi

from components.config import ClusterIdentity
from components.options import child_options
from components.transport import host_command

FILES = Path(__file__).parent / "files"
# The munge key is a host secret: its scripts live with the host's.
HOST_FILES = Path(__file__).parent.parent / "host" / "files"


@dataclass(frozen=True)
class ControllerPlacement:
    """Where slurmctld runs: in a node's container, or on the host (`container` None)."""

    hostname: str
    address: IPv4Address
    container: str | None

    @property
    def kind(self) -> str:
        return "container" if self.container else "host"


class SlurmController(pulumi.ComponentResource):
    """slurmctld in a node container (as the tutorial does) or on the host.

    `slurm_conf` and `gres_conf` are the rendered texts (components/slurm/slurm_conf.py):
    they describe the whole cluster, so the cluster renders them. `container` is the container
    slurmctld runs in (placement `container`): slurmctld waits for it and is replaced with it;
    the key and the host client need only the host.

    Builds:
      - `<name>-munge-key`: a random key unique to the cluster, created on the host in the
        cluster directory (0400); it never enters the repository, the Pulumi state or a log.
      - `<name>-client`: a munged for this cluster on a private socket and a copy of
        slurm.conf on the host, so `SLURM_CONF=... sinfo/srun` work from the host while the
        host's own munge and /etc/slurm stay untouched.
      - `<name>-slurmctld`: munge (first), slurm.conf and gres.conf, then slurmctld; a config
        change is written in place and applied with `scontrol reconfigure`, or a slurmctld
        restart when the node list changed (Slurm 22.05 cannot add nodes on a reconfigure).
    """

    slurm_conf: pulumi.Output[str]
    gres_conf: pulumi.Output[str]
    slurm_conf_path: pulumi.Output[str]
    address: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        cluster: ClusterIdentity,
        placement: ControllerPlacement,
        slurm_conf: str,
        gres_conf: str,
        container: pulumi.Resource | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("gpu-cluster:slurm:SlurmController", name, None, opts)
        key_file = f"{cluster.cluster_dir}/munge.key"
        conf_path = f"{cluster.cluster_dir}/slurm.conf"
        common = {
            "CLUSTER": cluster.name,
            "CLUSTER_DIR": cluster.cluster_dir,
            "MUNGE_KEY_FILE": key_file,
            "MUNGE_SOCKET": cluster.munge_socket,
        }
        self.munge_key = host_command(
            f"{name}-munge-key",
            create=HOST_FILES / "munge_key_create.sh",
            delete=HOST_FILES / "munge_key_delete.sh",
            environment=common,
            opts=child_options(self, opts),
        )
        self.client = host_command(
            f"{name}-client",
            create=FILES / "client_create.sh",
            delete=FILES / "client_delete.sh",
            environment={**common, "SLURM_CONF_PATH": conf_path, "SLURM_CONF_TEXT": slurm_conf},
            opts=child_options(self, opts, self.munge_key),
        )
        # In a container slurmctld reads /etc/slurm there; on the host, a directory of its own.
        where = (
            {"CONTAINER": placement.container, "SLURM_CONF_PATH": conf_path}
            if placement.container
            else {"CONTROLLER_CONF_DIR": f"{cluster.cluster_dir}/controller"}
        )
        self.slurmctld = host_command(
            f"{name}-slurmctld",
            create=FILES / f"slurmctld_{placement.kind}_create.sh",
            delete=FILES / f"slurmctld_{placement.kind}_delete.sh",
            environment={
                **common,
                **where,
                "SLURM_CONF_TEXT": slurm_conf,
                "GRES_CONF_TEXT": gres_conf,
            },
            # In a container, slurmctld lives there: a new container needs it set up again.
            opts=child_options(
                self,
                opts,
                self.munge_key,
                self.client,
                *([container] if container else []),
                replace_with=[container] if container else None,
            ),
        )
        self.slurm_conf = pulumi.Output.from_input(slurm_conf)
        self.gres_conf = pulumi.Output.from_input(gres_conf)
        self.slurm_conf_path = pulumi.Output.from_input(conf_path)
        self.address = pulumi.Output.from_input(str(placement.address))
        self.register_outputs(
            {
                "slurm_conf": self.slurm_conf,
                "gres_conf": self.gres_conf,
                "slurm_conf_path": self.slurm_conf_path,
                "address": self.address,
            }
        )
