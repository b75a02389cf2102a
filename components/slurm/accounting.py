"""Job accounting: MariaDB and slurmdbd in a container of their own, and the cluster's accounts."""

from dataclasses import dataclass
from pathlib import Path

import pulumi

from components.common.config_types import KEEP_DIR, ClusterIdentity
from components.common.options import child_options
from components.common.transport import Transport, env_list, host_command
from components.host.config import UserConfig
from components.lxc.cuda_container import USERS_RECORD
from components.lxc.lxc_conf import render_service_lxc_config
from components.network.config import NetworkConfig
from components.slurm.config import AccountingConfig

FILES = Path(__file__).parent / "files"
# The people of the cluster are made in containers by the same script as in the nodes.
LXC_FILES = Path(__file__).parent.parent / "lxc" / "files"

# The accounting container's packages, installed by LXC's Debian template.
DB_PACKAGES = ["mariadb-server", "slurmdbd", "munge", "procps", "iproute2"]
# Where the database keeps its files in the container (the host's data directory is bound there).
MYSQL_DIR = "/var/lib/mysql"


@dataclass(frozen=True)
class AccountingPaths:
    """Where the accounting database lives on the host, and what destroy keeps."""

    base: str
    data_dir: str
    password_file: str
    pending_dump: str
    kept_dump: str
    first_job_id: str

    @classmethod
    def of(cls, cluster: ClusterIdentity) -> "AccountingPaths":
        base = f"{cluster.cluster_dir}/accounting"
        return cls(
            base=base,
            data_dir=f"{base}/mysql",
            password_file=f"{base}/db-password",
            pending_dump=f"{base}/slurm_acct_db.sql.gz",
            kept_dump=f"{KEEP_DIR}/{cluster.name}/accounting/slurm_acct_db.sql.gz",
            first_job_id=f"{base}/first-job-id",
        )


def render_mariadb_conf() -> str:
    """MariaDB settings: localhost only (slurmdbd is its one client), Slurm's recommended lock wait."""
    return (
        "# Managed by the gpu-cluster Pulumi program.\n"
        "[mysqld]\n"
        "bind-address = 127.0.0.1\n"
        "innodb_buffer_pool_size = 128M\n"
        "innodb_lock_wait_timeout = 900\n"
    )


def db_fingerprint(release: str) -> list[str]:
    """What the container is built from: a change replaces it (its data directory stays)."""
    return [release, *DB_PACKAGES]


@dataclass(frozen=True)
class AccountingSetup:
    """What the controller needs to build its accounting database."""

    config: AccountingConfig
    network: NetworkConfig
    release: str
    users: tuple[UserConfig, ...]
    slurmdbd_conf: str
    after: tuple[pulumi.Resource, ...] = ()
    """What the database waits for (the host's packages, the bridges)."""
    cluster: ClusterIdentity | None = None
    """With several hosts: the cluster as the database's host names it, and that host's
    transport, munge key and Slurm client (default: the controller's)."""
    transport: Transport | None = None
    munge_key: pulumi.Resource | None = None
    client: pulumi.Resource | None = None


class AccountingDatabase(pulumi.ComponentResource):
    """MariaDB and slurmdbd for one cluster, in a container of their own.

    Builds, in this order:
      - `<name>-data`: on the host, the database's data directory (bound into the container,
        so it outlives the container) and a random password for the database's slurm user
        (0400 root). Its delete keeps the last dump in the kept directory
        (/var/cache/gpucluster/<cluster>/accounting/) unless `keep_dump` is false.
      - `<name>-lxc`: the container `<cluster>-<accounting.name>`, made by LXC's Debian
        template with MariaDB and slurmdbd, on the NAT bridge at `nat_address`.
      - `<name>-users`: the cluster's people in it (slurmdbd resolves names to uids).
      - `<name>-database`: MariaDB on the data directory (initialised, or restored from the
        kept dump with `restore`), the slurm database user; its delete dumps the database.
      - `<name>-slurmdbd`: munge, slurmdbd.conf (0600 slurm) and slurmdbd; the cluster is
        registered in the database.
    The controller's slurmctld waits for `slurmdbd`. With several hosts every command runs on
    the database's host (`transport`), wherever slurmctld is: slurmctld and slurmdbd reach each
    other over the routes between the hosts' container subnets.
    """

    container: pulumi.Output[str]
    address: pulumi.Output[str]
    data_dir: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        cluster: ClusterIdentity,
        setup: AccountingSetup,
        munge_key: pulumi.Resource,
        client: pulumi.Resource,
        opts: pulumi.ResourceOptions | None = None,
        transport: Transport | None = None,
    ):
        super().__init__("gpu-cluster:slurm:AccountingDatabase", name, None, opts)
        self._prefix, self._cluster, self._opts = name, cluster, opts
        # Placed: moved to another host, the old host's delete runs there (and keeps its dump).
        self._on_host = {"transport": transport, "placed": True}
        accounting, paths = setup.config, AccountingPaths.of(cluster)
        container = cluster.container_name(accounting.name)
        self.data = self._data(accounting, paths)
        self.lxc = self._container(setup, paths, container)
        people = []
        if setup.users:
            self.users = self._users(setup.users, container)
            people.append(self.users)
        self.database = self._database(accounting, paths, container)
        self.slurmdbd = host_command(
            f"{name}-slurmdbd",
            **self._on_host,
            create=FILES / "slurmdbd_create.sh",
            delete=FILES / "slurmdbd_delete.sh",
            environment={
                "CLUSTER": cluster.name,
                "CONTAINER": container,
                "SLURMDBD_CONF_TEXT": setup.slurmdbd_conf,
                "PASSWORD_FILE": paths.password_file,
                "MUNGE_KEY_FILE": f"{cluster.cluster_dir}/munge.key",
                "MUNGE_SOCKET": cluster.munge_socket,
                "CLUSTER_DIR": cluster.cluster_dir,
            },
            opts=child_options(self, opts, self.database, *people, munge_key, client, replace_with=[self.lxc]),
        )
        self.container = pulumi.Output.from_input(container)
        self.address = pulumi.Output.from_input(str(accounting.nat_address))
        self.data_dir = pulumi.Output.from_input(paths.data_dir)
        self.register_outputs({"container": self.container, "address": self.address, "data_dir": self.data_dir})

    def _data(self, accounting: AccountingConfig, paths: AccountingPaths) -> pulumi.Resource:
        """The data directory and the database password on the host; its delete keeps the dump."""
        return host_command(
            f"{self._prefix}-data",
            **self._on_host,
            create=FILES / "accounting_data_create.sh",
            delete=FILES / "accounting_data_delete.sh",
            environment={
                "CLUSTER": self._cluster.name,
                "DATA_DIR": paths.data_dir,
                "PASSWORD_FILE": paths.password_file,
                "PENDING_DUMP": paths.pending_dump,
                "KEEP_DUMP": "yes" if accounting.keep_dump else "no",
                "KEPT_DUMP": paths.kept_dump,
                "FIRST_JOB_ID_FILE": paths.first_job_id,
            },
            opts=child_options(self, self._opts),
        )

    def _container(self, setup: AccountingSetup, paths: AccountingPaths, container: str) -> pulumi.Resource:
        """The container with MariaDB and slurmdbd, on the NAT bridge, its data directory bound in."""
        accounting, cluster = setup.config, self._cluster
        return host_command(
            f"{self._prefix}-lxc",
            **self._on_host,
            create=FILES / "dbd_container_create.sh",
            delete=FILES / "dbd_container_delete.sh",
            environment={
                "CLUSTER": cluster.name,
                "CLUSTER_DIR": cluster.cluster_dir,
                "CONTAINER": container,
                "NODE_HOSTNAME": accounting.name,
                "LXC_CONFIG": render_service_lxc_config(
                    accounting.name, accounting.nat_address, setup.network, {paths.data_dir: MYSQL_DIR}, container
                ),
                "NAT_ADDRESS": str(accounting.nat_address),
                "RELEASE": setup.release,
                "PACKAGES": env_list(DB_PACKAGES),
                "DATA_DIR": paths.data_dir,
            },
            triggers=db_fingerprint(setup.release),
            # Fixed name and address: the old container goes before a new one is made.
            opts=child_options(self, self._opts, self.data, delete_before_replace=True),
        )

    def _users(self, users: tuple[UserConfig, ...], container: str) -> pulumi.Resource:
        """The cluster's people in the container (slurmdbd resolves names to uids)."""
        return host_command(
            f"{self._prefix}-users",
            **self._on_host,
            create=LXC_FILES / "users_create.sh",
            delete=LXC_FILES / "users_delete.sh",
            environment={
                "CONTAINER": container,
                "USERS": env_list(user.spec for user in users),
                "USERS_RECORD": USERS_RECORD,
            },
            # What is set up inside the container is set up again in a new one.
            opts=child_options(self, self._opts, self.lxc, replace_with=[self.lxc]),
        )

    def _database(self, accounting: AccountingConfig, paths: AccountingPaths, container: str) -> pulumi.Resource:
        """MariaDB on the data directory, initialised or restored; its delete dumps it."""
        return host_command(
            f"{self._prefix}-database",
            **self._on_host,
            create=FILES / "database_create.sh",
            delete=FILES / "database_delete.sh",
            environment={
                "CLUSTER": self._cluster.name,
                "CONTAINER": container,
                "PASSWORD_FILE": paths.password_file,
                "FIRST_JOB_ID_FILE": paths.first_job_id,
                "MYSQL_CONF_TEXT": render_mariadb_conf(),
                "RESTORE": "yes" if accounting.restore else "no",
                "KEPT_DUMP": paths.kept_dump,
                "PENDING_DUMP": paths.pending_dump,
            },
            opts=child_options(self, self._opts, self.lxc, self.data, replace_with=[self.lxc]),
        )


def account_lines(accounting: AccountingConfig) -> dict[str, str]:
    """The accounts script's parameters: one line per QOS, account and (user, account) pair."""

    def value(item) -> str:
        return "-" if item is None or item == [] else ",".join(item) if isinstance(item, list) else str(item)

    return {
        "QOS": env_list(
            f"{q.name} {q.priority} {value(q.max_gpus_per_user)} {value(q.max_wall_minutes)}" for q in accounting.qos
        ),
        "ACCOUNTS": env_list(
            f"{a.name} {value(a.gpus)} {value(a.qos)} {value(a.default_qos)}" for a in accounting.accounts
        ),
        "MEMBERS": env_list(f"{user} {a.name}" for a in accounting.accounts for user in a.users),
    }


class SlurmAccounts(pulumi.ComponentResource):
    """The cluster's accounts, members, GPU limits and QOS, kept as the config lists them.

    Builds `<name>-apply`: sacctmgr from the host (the cluster's slurm.conf), after slurmctld
    has registered the cluster's TRES (gres/gpu) with slurmdbd. Only changes are sent; what
    the program made carries the organization/description `gpucluster-<cluster>`, and only
    that is ever changed or removed; an account with jobs is not removed.
    """

    managed_by: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        cluster: ClusterIdentity,
        accounting: AccountingConfig,
        opts: pulumi.ResourceOptions | None = None,
        transport: Transport | None = None,
    ):
        super().__init__("gpu-cluster:slurm:SlurmAccounts", name, None, opts)
        managed_by = f"gpucluster-{cluster.name}"
        self.apply = host_command(
            f"{name}-apply",
            transport=transport,
            placed=True,
            create=FILES / "accounts_create.sh",
            environment={
                "CLUSTER": cluster.name,
                "CLUSTER_DIR": cluster.cluster_dir,
                "MANAGED_BY": managed_by,
                **account_lines(accounting),
            },
            opts=child_options(self, opts),
        )
        self.managed_by = pulumi.Output.from_input(managed_by)
        self.register_outputs({"managed_by": self.managed_by})
