"""SlurmController: the cluster's munge key, slurmctld, and Slurm client access from the host."""

from dataclasses import dataclass
from ipaddress import IPv4Address
from pathlib import Path

import pulumi

from components.common.config_types import ClusterIdentity
from components.common.options import child_options
from components.common.transport import Transport, host_command
from components.slurm.accounting import AccountingDatabase, AccountingSetup
from components.slurm.slurm_conf import render_cgroup_conf

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
    slurmctld runs in (placement `container`): slurmctld waits for it and is replaced with it
    and with what it `lives_on` (CudaContainer.lives_on: also the image a new clone comes from),
    its delete saving the queue before the old container goes; the key and the host client
    need only the host.

    Builds:
      - `<name>-munge-key`: a random key unique to the cluster, created on the host in the
        cluster directory (0400); it never enters the repository, the Pulumi state or a log.
        Not built when `munge_key` is given (several hosts share one key, installed by the
        cluster on each host).
      - `<name>-client`: a munged for this cluster on a private socket and a copy of
        slurm.conf on the host, so `SLURM_CONF=... sinfo/srun` work from the host while the
        host's own munge and /etc/slurm stay untouched. Not built when `client` is given
        (several hosts: the cluster makes one per host).
      - `<name>-accounting` (with `accounting`): the AccountingDatabase (MariaDB and slurmdbd
        in their own container, on the host `accounting` names); slurmctld waits for slurmdbd.
      - `<name>-slurmctld`: munge (first), slurm.conf and gres.conf, then slurmctld; a config
        change is written in place and applied with `scontrol reconfigure`, or a slurmctld
        restart when the node list or the accounting settings changed (Slurm 22.05 cannot add
        nodes, or change its accounting plugins, on a reconfigure).
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
        lives_on: list[pulumi.Resource] | None = None,
        accounting: AccountingSetup | None = None,
        opts: pulumi.ResourceOptions | None = None,
        transport: Transport | None = None,
        munge_key: pulumi.Resource | None = None,
        client: pulumi.Resource | None = None,
    ):
        super().__init__("gpu-cluster:slurm:SlurmController", name, None, opts)
        self._prefix, self._opts, self._transport = name, opts, transport
        conf_path = f"{cluster.cluster_dir}/slurm.conf"
        self._common = {
            "CLUSTER": cluster.name,
            "CLUSTER_DIR": cluster.cluster_dir,
            "MUNGE_KEY_FILE": f"{cluster.cluster_dir}/munge.key",
            "MUNGE_SOCKET": cluster.munge_socket,
        }
        self._key_and_client(munge_key, client, conf_path, slurm_conf)
        # Order: database -> slurmdbd -> slurmctld (which registers its TRES with slurmdbd).
        self.accounting = self._accounting(cluster, accounting) if accounting else None
        # The key and the host client need only the host (made while the containers boot);
        # slurmctld in a container waits for it.
        before_slurmctld = [self.munge_key, self.client, *([container] if container else [])]
        if self.accounting:
            before_slurmctld.append(self.accounting.slurmdbd)
        # In a container slurmctld reads /etc/slurm there; on the host, a directory of its own.
        where = (
            {"CONTAINER": placement.container, "SLURM_CONF_PATH": conf_path}
            if placement.container
            else {"CONTROLLER_CONF_DIR": f"{cluster.cluster_dir}/controller"}
        )
        self.slurmctld = host_command(
            f"{name}-slurmctld",
            transport=transport,
            create=FILES / f"slurmctld_{placement.kind}_create.sh",
            delete=FILES / f"slurmctld_{placement.kind}_delete.sh",
            environment={
                **self._common,
                **where,
                "SLURM_CONF_TEXT": slurm_conf,
                "GRES_CONF_TEXT": gres_conf,
                "CGROUP_CONF_TEXT": render_cgroup_conf(),
            },
            # Moved to another host: the old slurmctld is stopped there before the new one starts
            # (never two). In a container, slurmctld lives there: a new container needs it set up again.
            placed=True,
            # It runs in its container: created after it, and (replaced with it) deleted before it,
            # so its delete still finds the container and saves the queue for the new one.
            opts=child_options(
                self,
                opts,
                *before_slurmctld,
                *([container] if container else []),
                delete_before_replace=True,
                replace_with=(lives_on or [container]) if container else None,
            ),
        )
        self._outputs(slurm_conf, gres_conf, conf_path, placement)

    def _key_and_client(
        self, munge_key: pulumi.Resource | None, client: pulumi.Resource | None, conf_path: str, slurm_conf: str
    ) -> None:
        """The cluster's munge key and the host's Slurm client, unless the cluster gives them."""
        # With several hosts the cluster installs one key on each (`munge_key`, from a secret).
        self.munge_key = munge_key or host_command(
            f"{self._prefix}-munge-key",
            transport=self._transport,
            create=HOST_FILES / "munge_key_create.sh",
            delete=HOST_FILES / "munge_key_delete.sh",
            environment=self._common,
            opts=child_options(self, self._opts),
        )
        # With several hosts the cluster gives every host its own client, the controller's
        # included (`client`): a client that moved with the controller would share its paths
        # with the per-host client of the host it moved to.
        self.client = client or host_command(
            f"{self._prefix}-client",
            transport=self._transport,
            create=FILES / "client_create.sh",
            delete=FILES / "client_delete.sh",
            environment={**self._common, "SLURM_CONF_PATH": conf_path, "SLURM_CONF_TEXT": slurm_conf},
            opts=child_options(self, self._opts, self.munge_key),
        )

    def _accounting(self, cluster: ClusterIdentity, accounting: AccountingSetup) -> AccountingDatabase:
        """The accounting database, on the host `accounting` names (default: this one)."""
        return AccountingDatabase(
            f"{self._prefix}-accounting",
            accounting.cluster or cluster,
            accounting,
            munge_key=accounting.munge_key or self.munge_key,
            client=accounting.client or self.client,
            # Not after the controller's own dependencies: the database's container is
            # made while the node image is built.
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(accounting.after)),
            transport=accounting.transport or self._transport,
        )

    def _outputs(self, slurm_conf: str, gres_conf: str, conf_path: str, placement: ControllerPlacement) -> None:
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
