"""Typed config of Slurm: the nodes, the controller, partitions, the health check and job
accounting (accounts, QOS), with Slurm's reserved words and its hostlist form."""

import re
from collections.abc import Iterable
from itertools import pairwise
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, StringConstraints

from components.common.config_types import (  # noqa: F401 (SLURM_RESERVED_PARTITION_NAMES: used through this module)
    SLURM_RESERVED_PARTITION_NAMES,
    Address,
    Hostname,
    Network,
    Port,
    SlurmTime,
    StrictBool,
    StrictInt,
    StrictModel,
    UserName,
    slurm_seconds,
)
from components.network.config import SOURCES_DESCRIPTION

# Names Slurm 22.05 reads as keywords, case-insensitively: `NodeName=DEFAULT` sets defaults
# instead of defining a node, `NodeName=ALL` is fatal, `Nodes=ALL` means every node, and
# `SlurmctldHost=localhost` is replaced by the host's own name.
SLURM_RESERVED_NODE_NAMES = frozenset({"default", "all", "localhost"})
# SLURM_RESERVED_PARTITION_NAMES: in components/common/config_types.py (burst partitions use it too).


# What a node container may hold besides its jobs (systemd, munged, slurmd and the job
# steps' slurmstepd), in MB.
NODE_DAEMON_MEMORY_MB = 256
# More for the node that runs slurmctld (placement: container): slurmctld with its queue and
# state, and the Slurm commands the host runs there (status writer, exporter, health gate).
CONTROLLER_DAEMON_MEMORY_MB = 512
# And with burst: the burst programs run beside slurmctld (a boto3 Python for resume, suspend
# and the reconciler every minute, each some 60-100 MB, several at once).
BURST_DAEMON_MEMORY_MB = 512
# The ids of the login node's user namespace: container ids 0..LOGIN_ID_RANGE-1.
LOGIN_ID_RANGE = 65536

_TRAILING_NUMBER = re.compile(r"^(.*?)([0-9]*)$", re.ASCII | re.DOTALL)


def slurm_hostlist(names: Iterable[str]) -> str:
    """Names in Slurm's hostlist form, e.g. `c[000-003],gpu7`.

    Only a trailing number is bracketed: Slurm 22.05 cannot parse a bracket followed by more
    text (`c[1-2]a`), which a general hostlist library writes for names like c1a, c2a.
    """
    groups: dict[tuple[str, int], list[int]] = {}
    for name in names:
        prefix, digits = _TRAILING_NUMBER.match(name).groups()
        groups.setdefault((prefix, len(digits)), []).append(int(digits) if digits else -1)
    parts = []
    for (prefix, width), numbers in groups.items():
        if width == 0:
            parts.append(prefix)
            continue
        numbers = sorted(set(numbers))
        runs, start = [], numbers[0]
        for previous, number in pairwise(numbers):
            if number != previous + 1:
                runs.append((start, previous))
                start = number
        runs.append((start, numbers[-1]))
        text = ",".join(f"{a:0{width}d}" + (f"-{b:0{width}d}" if b != a else "") for a, b in runs)
        parts.append(f"{prefix}[{text}]" if len(numbers) > 1 else f"{prefix}{text}")
    return ",".join(parts)


class NodeConfig(StrictModel):
    """One Slurm compute node, one LXC container."""

    name: Hostname = Field(description="hostname, container name suffix and Slurm NodeName")
    nat_address: Address = Field(description="static address on the NAT bridge")
    cluster_address: Address = Field(description="static address on the cluster bridge")
    gpus: StrictInt = Field(1, ge=0, le=16, description="GPUs (GRES gpu count) of the node")
    cpus: StrictInt = Field(
        1,
        ge=1,
        le=1024,
        description="CPUs of the node: Slurm's CPUs= and the container's cpuset (that many of the host's "
        "online CPUs, dealt to its nodes in turn); the preflight checks the host has them",
    )
    memory_mb: StrictInt | None = Field(
        None,
        ge=64,
        le=16777216,
        description="memory of the node in MB: Slurm's RealMemory, what its jobs may hold in all, and the "
        "container's memory limit (that plus NODE_DAEMON_MEMORY_MB for the node's own daemons); the "
        "preflight checks the host has it for all its nodes. Default: the node's share of its host's memory by "
        "CPUs, measured once (less 1 GB for the host and the limits of the login node and the other nodes)",
    )
    gpu_shards: StrictInt = Field(
        0,
        ge=0,
        le=128,
        description="Slurm shards of each of the node's GPUs (gres/shard): that many jobs may share one GPU "
        "at once, each asking for --gres=shard:1 and confined to that GPU; 0: none, a GPU goes to one job",
    )
    host: Hostname | None = Field(None, description="hosts[].name of the host it runs on (needed with several hosts)")

    @property
    def memory(self) -> int:
        """The node's memory in MB: memory_mb, or its host's share once the host is measured
        (ClusterConfig.with_node_memory, components/composition/node_memory.py)."""
        if self.memory_mb is None:
            raise ValueError(
                f"{self.name}: its memory (no memory_mb) is its host's share, not known before it is measured"
            )
        return self.memory_mb


class ControllerConfig(StrictModel):
    """Where slurmctld runs."""

    placement: Literal["container", "host"] = Field(
        "container",
        description="'container': in one of the nodes, as the tutorial does; 'host': in a container of its own "
        "on the host (from the node image, no GPUs), so no node shares its CPUs with slurmctld",
    )
    node: Hostname | None = Field(
        None, description="node that runs slurmctld when placement is 'container' (default: first)"
    )
    host: Hostname | None = Field(
        None, description="hosts[].name of the host that runs slurmctld when placement is 'host' (default: first)"
    )
    name: Hostname = Field(
        "slurmctld",
        description="with placement 'host': the controller container's host name (container <cluster>-<name>)",
    )
    nat_address: Address | None = Field(
        None,
        description="with placement 'host': the controller container's address on the NAT bridge "
        "(default: the subnet's last usable address)",
    )


def _check_time_limit(value: str) -> str:
    if slurm_seconds(value) == 0:
        raise ValueError(f"{value!r} is no time at all: no job could run; give a limit, or INFINITE")
    return value


class PartitionConfig(StrictModel):
    name: Hostname = Field(description="partition name")
    nodes: list[Hostname] | None = Field(None, description="node names (default: all nodes)")
    default: StrictBool = Field(False, description="the default partition (exactly one)")
    max_time: Annotated[SlurmTime, AfterValidator(_check_time_limit)] = Field("INFINITE", description="MaxTime")
    oversubscribe: Literal["NO", "YES", "FORCE", "EXCLUSIVE"] = Field(
        "NO", description="OverSubscribe (replaces the tutorial's removed Shared=)"
    )


class HealthCheckConfig(StrictModel):
    """Slurm's HealthCheckProgram on every node: a node whose GPUs fail the check drains itself."""

    interval_s: StrictInt = Field(
        60, ge=5, le=86400, description="HealthCheckInterval: seconds between checks on every node"
    )


class SlurmConfig(StrictModel):
    controller: ControllerConfig = ControllerConfig()
    partitions: list[PartitionConfig] = Field([PartitionConfig(name="gpu", default=True)], min_length=1)
    health_check: HealthCheckConfig | None = Field(
        None,
        description="GPU health check: device nodes present with their major:minor and not refused, "
        "nvidia-smi's GPU count where it exists, Slurm's GRES count; a failing node is drained "
        "with Reason='gpu-health: ...' and resumed when the check passes again",
    )


# Words sacctmgr reads as keywords where `add account|qos|user NAME` expects a name (any case):
# `sacctmgr add account set` adds nothing ("Need name of account to add").
SACCTMGR_KEYWORDS = frozenset({"set", "where"})

# Slurm account and QOS names: lower case (Slurm stores them so), no separators sacctmgr parses.
SlurmName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_-]{0,29}$")]


class QosConfig(StrictModel):
    """A Slurm QOS (sacctmgr add qos)."""

    name: SlurmName = Field(description="QOS name")
    priority: StrictInt = Field(0, ge=0, le=1000000, description="Priority")
    max_gpus_per_user: StrictInt | None = Field(
        None, ge=0, le=100000, description="MaxTRESPerUser=gres/gpu=N (none: unlimited)"
    )
    max_wall_minutes: StrictInt | None = Field(
        None, ge=1, le=5256000, description="MaxWall in minutes (none: unlimited)"
    )


class AccountConfig(StrictModel):
    """A Slurm account of the cluster, its users and its GPU limit."""

    name: SlurmName = Field(description="account name")
    gpus: StrictInt | None = Field(
        None, ge=0, le=100000, description="GrpTRES=gres/gpu=N: GPUs the account's running jobs may hold at once"
    )
    users: list[UserName] = Field(
        [], description="members (names from users[]); a user's first account is their default"
    )
    qos: list[SlurmName] = Field(
        [], description="QOS the account may use (names from accounting.qos[]); none: Slurm's 'normal'"
    )
    default_qos: SlurmName | None = Field(None, description="DefaultQOS, one of qos")


class AccountingConfig(StrictModel):
    """Job accounting: MariaDB and slurmdbd in a container of their own, accounts and limits."""

    name: Hostname = Field("db", description="the database container's hostname (container <cluster>-<name>)")
    nat_address: Address = Field(
        description="static address of the database container on the NAT bridge (of `host` with several hosts)"
    )
    host: Hostname | None = Field(
        None,
        description="hosts[].name of the host the database container runs on (default: the controller's host)",
    )
    accounts: list[AccountConfig] = Field([], description="accounts created and kept as listed (sacctmgr)")
    qos: list[QosConfig] = Field([], description="QOS created and kept as listed (sacctmgr)")
    keep_dump: StrictBool = Field(
        True,
        description="destroy keeps a dump of the accounting database in /var/cache/gpucluster/<cluster>/accounting/",
    )
    restore: StrictBool = Field(
        False,
        description="a new, empty database is loaded from the kept dump when there is one",
    )


class LoginConfig(StrictModel):
    """The login node: a container of the node image where users[] log in over SSH (their
    ssh_keys) and submit jobs; shared_dir and the Slurm client, no Slurm daemon."""

    name: Hostname = Field("login", description="the container's hostname (container <cluster>-<name>)")
    nat_address: Address = Field(description="static address on the NAT bridge (of `host` with several hosts)")
    host_port: Port = Field(2222, description="host port forwarded to the login node's SSH (port 22)")
    allowed_sources: list[Network] = Field([], max_length=32, description=SOURCES_DESCRIPTION)
    host: Hostname | None = Field(None, description="hosts[].name of the host it runs on (needed with several hosts)")
    cpus: StrictInt = Field(
        2,
        ge=1,
        le=1024,
        description="CPUs of the login node: its cpuset, that many of its host's online CPUs, dealt after the "
        "nodes' (people's shells and builds there never take a node's CPUs while the host has enough)",
    )
    memory_mb: StrictInt = Field(
        2048,
        ge=256,
        le=16777216,
        description="memory of the login node in MB, its container's limit: a person past it is ended there, "
        "alone; the preflight counts it with the nodes'",
    )
    host_id_base: StrictInt | None = Field(
        None,
        ge=LOGIN_ID_RANGE,
        le=2**32 - 2 * LOGIN_ID_RANGE,
        description="first host id of the login node's user namespace: its root and system users are host ids "
        f"from here ({LOGIN_ID_RANGE} of them; the people keep their own). Default: one range per cluster name, "
        "from 1000000 on",
    )
