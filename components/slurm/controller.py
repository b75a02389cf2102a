"""SlurmController: the cluster's munge key, slurmctld, and the host's Slurm client (from the node image)."""

from dataclasses import dataclass
from ipaddress import IPv4Address
from pathlib import Path

import pulumi

from components.common.config_types import ClusterIdentity
from components.common.options import child_options
from components.common.transport import Transport, host_command
from components.containers.node_files import plugstack_conf
from components.slurm.accounting import AccountingDatabase, AccountingSetup
from components.slurm.slurm_conf import render_cgroup_conf

FILES = Path(__file__).parent / "files"
# The munge key is a host secret: its scripts live with the host's.
HOST_FILES = Path(__file__).parent.parent / "host" / "files"


@dataclass(frozen=True)
class ClientContainer:
    """The container of the cluster on a host that runs the host's Slurm commands (its image's
    Slurm), and what it lives on: replaced with it, the client is set up again."""

    name: str
    lxc: pulumi.Resource
    lives_on: list[pulumi.Resource]
    containers_image: str | None = None
    """With jobs in container images: the node image whose build of Pyxis the container
    installs when its own image predates it (lib/containers_addon.sh); the host's srun and
    sbatch load Pyxis."""
    setup: pulumi.Resource | None = None
    """The node's setup for them, when the container is a node's: the client comes after it."""


def slurm_client(
    name: str,
    common: dict[str, str],
    via: ClientContainer,
    slurm_conf: pulumi.Input[str],
    parent: pulumi.Resource,
    opts: pulumi.ResourceOptions | None,
    transport: Transport | None,
    host_munge_dir: str = "",
    after: list[pulumi.Resource] | None = None,
    aliases: list[pulumi.Alias] | None = None,
) -> pulumi.Resource:
    """A host's Slurm client: wrappers in the cluster directory running sinfo, srun, sacctmgr...
    in `via`, which gets the cluster's munge and a copy of slurm.conf (client_create.sh)."""
    return host_command(
        name,
        transport=transport,
        create=FILES / "client_create.sh",
        delete=FILES / "client_delete.sh",
        environment={
            **common,
            "CONTAINER": via.name,
            "SLURM_CONF_TEXT": slurm_conf,
            **({"HOST_MUNGE_DIR": host_munge_dir} if host_munge_dir else {}),
            # Added only when used: a cluster without it keeps its inputs.
            **(
                {"PLUGSTACK_CONF_TEXT": plugstack_conf(), "IMAGE": via.containers_image} if via.containers_image else {}
            ),
        },
        # Same paths for old and new: the old one's delete goes first.
        opts=pulumi.ResourceOptions.merge(
            child_options(
                parent,
                opts,
                via.lxc,
                *filter(None, [via.setup]),
                *(after or []),
                delete_before_replace=True,
                replace_with=via.lives_on,
            ),
            pulumi.ResourceOptions(aliases=aliases),
        ),
    )


@dataclass(frozen=True)
class ControllerPlacement:
    """Where slurmctld runs: a node's container, or its own (placement 'host'); always the node
    image's Slurm."""

    hostname: str
    address: IPv4Address
    container: str


class SlurmController(pulumi.ComponentResource):
    """slurmctld in a node container (as the tutorial does) or in a container of its own.

    `slurm_conf` and `gres_conf` are the rendered texts (components/slurm/slurm_conf.py):
    they describe the whole cluster, so the cluster renders them. `container` is the container
    slurmctld runs in (a node's, or its own with placement `host`): slurmctld waits for it and is replaced with it
    and with what it `lives_on` (CudaContainer.lives_on: also the image a new clone comes from),
    its delete saving the queue before the old container goes; the key needs only the host.

    Builds:
      - `<name>-munge-key`: a random key unique to the cluster, created on the host in the
        cluster directory (0400); it never enters the repository, the Pulumi state or a log.
        Not built when `munge_key` is given (several hosts share one key, installed by the
        cluster on each host).
      - `<name>-client`: the host's Slurm client from the node image: `client_container`
        (a container of the cluster on the host) gets the cluster's munge and a copy of
        slurm.conf, and the cluster directory's bin/ wrappers that run sinfo, srun, sacctmgr...
        there. The host needs no Slurm of its own. Not built when `client` is given (several
        hosts: the cluster makes one per host).
      - `<name>-accounting` (with `accounting`): the AccountingDatabase (MariaDB and slurmdbd
        in their own container, on the host `accounting` names); slurmctld waits for slurmdbd.
      - `<name>-slurmctld`: munge (first), slurm.conf and gres.conf, then slurmctld; a config
        change is written in place and applied with `scontrol reconfigure`, or a slurmctld
        restart when the node list or the accounting settings changed (Slurm 22.05 cannot add
        nodes, or change its accounting plugins, on a reconfigure). After `nodes_ready` (with
        jobs in container images: every node's setup, so no slurmd is handed a prolog or a
        `required` Pyxis its node lacks).
    """

    slurm_conf: pulumi.Output[str]
    gres_conf: pulumi.Output[str]
    address: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        cluster: ClusterIdentity,
        placement: ControllerPlacement,
        slurm_conf: pulumi.Input[str],
        gres_conf: str,
        container: pulumi.Resource | None = None,
        lives_on: list[pulumi.Resource] | None = None,
        accounting: AccountingSetup | None = None,
        opts: pulumi.ResourceOptions | None = None,
        transport: Transport | None = None,
        munge_key: pulumi.Resource | None = None,
        client: pulumi.Resource | None = None,
        client_container: ClientContainer | None = None,
        plugstack_conf: str | None = None,
        nodes_ready: tuple[pulumi.Resource, ...] = (),
    ):
        super().__init__("gpu-cluster:slurm:SlurmController", name, None, opts)
        self._prefix, self._opts, self._transport = name, opts, transport
        self._common = {
            "CLUSTER": cluster.name,
            "CLUSTER_DIR": cluster.cluster_dir,
            "MUNGE_KEY_FILE": f"{cluster.cluster_dir}/munge.key",
            "MUNGE_SOCKET": cluster.munge_socket,
        }
        self._key_and_client(munge_key, client, client_container, slurm_conf)
        # Order: database -> slurmdbd -> slurmctld (which registers its TRES with slurmdbd).
        self.accounting = self._accounting(cluster, accounting) if accounting else None
        # The key needs only the host (made while the containers boot); the host's client
        # waits for its container, slurmctld for both.
        before_slurmctld = [self.munge_key, self.client, *([container] if container else []), *nodes_ready]
        if self.accounting:
            before_slurmctld.append(self.accounting.slurmdbd)
        self.slurmctld = host_command(
            f"{name}-slurmctld",
            transport=transport,
            create=FILES / "slurmctld_container_create.sh",
            delete=FILES / "slurmctld_container_delete.sh",
            environment={
                **self._common,
                "CONTAINER": placement.container,
                "SLURM_CONF_TEXT": slurm_conf,
                "GRES_CONF_TEXT": gres_conf,
                "CGROUP_CONF_TEXT": render_cgroup_conf(),
                # Added only when used: a cluster without it keeps its inputs. Pyxis in its
                # container: a node's setup, or (its own container) the host's client puts it there.
                **({"PLUGSTACK_CONF_TEXT": plugstack_conf} if plugstack_conf else {}),
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
        self._outputs(slurm_conf, gres_conf, placement)

    def _key_and_client(
        self,
        munge_key: pulumi.Resource | None,
        client: pulumi.Resource | None,
        client_container: ClientContainer | None,
        slurm_conf: pulumi.Input[str],
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
        if client is None:
            assert client_container is not None, "a controller without `client` makes its host's"
            client = slurm_client(
                f"{self._prefix}-client",
                self._common,
                client_container,
                slurm_conf,
                self,
                self._opts,
                self._transport,
                host_munge_dir=str(Path(self._common["MUNGE_SOCKET"]).parent),
                after=[self.munge_key],
            )
        self.client = client

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

    def _outputs(self, slurm_conf: pulumi.Input[str], gres_conf: str, placement: ControllerPlacement) -> None:
        self.slurm_conf = pulumi.Output.from_input(slurm_conf)
        self.gres_conf = pulumi.Output.from_input(gres_conf)
        self.address = pulumi.Output.from_input(str(placement.address))
        self.register_outputs(
            {
                "slurm_conf": self.slurm_conf,
                "gres_conf": self.gres_conf,
                "address": self.address,
            }
        )
