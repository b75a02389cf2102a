"""slurm.conf and gres.conf for the Slurm of the node image (22.05 on bookworm, 24.11 on
trixie: components/lxc/config.py RELEASES), rendered from the cluster config.

Pure functions: the text is a resource input, so `pulumi preview` shows its line diff.
Node lines and gres.conf are built from the same GPU assignment, so a node's `Gres=gpu:N`
and its gres.conf `File=` lines cannot disagree.
"""

from collections.abc import Iterable, Mapping
from ipaddress import IPv4Address
from typing import Protocol

from components.burst.config import BurstConfig
from components.burst.layout import BurstLayout
from components.common.rendering import HEADER, container_device_path
from components.containers.node_files import PROLOG_PROGRAM
from components.lxc.config import ImageConfig
from components.slurm.config import (
    BURST_DAEMON_MEMORY_MB,
    CONTROLLER_DAEMON_MEMORY_MB,
    NODE_DAEMON_MEMORY_MB,
    AccountingConfig,
    NodeConfig,
    SlurmConfig,
    slurm_hostlist,
)

SLURMCTLD_PORT = 6817
SLURMD_PORT = 6818
# The ports srun listens on for its tasks (SrunPortRange, set with burst): burst nodes are
# admitted to the nodes' containers on these and SLURMD_PORT only (inbound_rules).
SRUN_PORTS = (60001, 63000)


class SlurmCluster(Protocol):
    """What the Slurm files need of the cluster (components/composition/cluster.py passes the composed
    config, components/composition/config.py's ClusterConfig): its name, nodes and their GPU devices, the
    Slurm, accounting and burst settings, and where the controller runs."""

    name: str
    nodes: list[NodeConfig]
    slurm: SlurmConfig
    accounting: AccountingConfig | None
    burst: BurstConfig | None
    image: ImageConfig

    @property
    def containers_enabled(self) -> bool: ...
    @property
    def node_names(self) -> list[str]: ...
    @property
    def controller_node(self) -> NodeConfig | None: ...
    @property
    def controller_address(self) -> IPv4Address: ...
    @property
    def munge_socket(self) -> str: ...
    @property
    def cluster_dir(self) -> str: ...
    def gpu_assignment(self) -> dict[str, list[str]]: ...


def format_line(pairs: Mapping[str, object]) -> str:
    """`Key=value` pairs joined by spaces; None drops a key, booleans become YES/NO."""
    parts = []
    for key, value in pairs.items():
        if value is None:
            continue
        if isinstance(value, bool):
            value = "YES" if value else "NO"
        parts.append(f"{key}={value}")
    return " ".join(parts)


def _lines(items: Iterable[Mapping[str, object]]) -> str:
    return "".join(format_line(item) + "\n" for item in items)


def pid_file(daemon: str, version: tuple[int, int]) -> str:
    """Where slurmctld or slurmdbd writes its pid. 22.05's Debian units run them as root; 24.11's
    run them as slurm, which may write only in the unit's RuntimeDirectory (/run/<daemon>)."""
    return f"/run/{daemon}/{daemon}.pid" if version >= (24, 11) else f"/run/{daemon}.pid"


def controller_paths(config: SlurmCluster) -> dict[str, str]:
    """Where slurmctld keeps its state: Debian's paths in its container (a node's or its own)."""
    return {
        "StateSaveLocation": "/var/lib/slurm/slurmctld",
        "SlurmctldPidFile": pid_file("slurmctld", config.image.slurm_version),
        "SlurmctldLogFile": "/var/log/slurm/slurmctld.log",
    }


def render_slurm_conf(config: SlurmCluster, controller_hostname: str, munge_socket: str | None = None) -> str:
    """slurm.conf: served to every slurmd by the controller (configless mode). Another host's
    client copy names that host's own munge socket (`munge_socket`)."""
    general = {
        "ClusterName": config.name,
        "SlurmctldHost": f"{controller_hostname}({config.controller_address})",
        # Nodes fetch slurm.conf and gres.conf from slurmctld, so adding a node never
        # rewrites a file on the other nodes.
        "SlurmctldParameters": "enable_configless",
        "AuthType": "auth/munge",
        "CredType": "cred/munge",
        "AuthInfo": f"socket={munge_socket or config.munge_socket}",
        "SlurmUser": "slurm",
        "SlurmdUser": "root",
        "SlurmctldPort": SLURMCTLD_PORT,
        "SlurmdPort": SLURMD_PORT,
        **controller_paths(config),
        "SlurmdSpoolDir": "/var/lib/slurm/slurmd",
        "SlurmdPidFile": "/run/slurmd.pid",
        "SlurmdLogFile": "/var/log/slurm/slurmd.log",
        # Jobs contained in their node (cgroup.conf): a job's processes are tracked and ended by
        # its cgroup, it runs on its cores, holds its memory and opens only its GPUs.
        "ProctrackType": "proctrack/cgroup",
        "TaskPlugin": "task/cgroup,task/affinity",
        "SelectType": "select/cons_tres",
        # Memory is scheduled: a job gets what it asks for (--mem, else DefMemPerCPU) and no more.
        "SelectTypeParameters": "CR_Core_Memory",
        "DefMemPerCPU": default_memory_per_cpu(config),
        "SchedulerType": "sched/backfill",
        # Both always: nodes[].gpu_shards added later changes no daemon's plugins.
        "GresTypes": "gpu,shard",
        "MpiDefault": "none",
        "MailProg": "/bin/true",
        "ReturnToService": 2,
        "SlurmdTimeout": 120,
        "SwitchType": "switch/none",
        "JobAcctGatherType": "jobacct_gather/none",
        "JobCompType": "jobcomp/none",
        "AccountingStorageType": "accounting_storage/none",
        **accounting_settings(config, munge_socket),
        **health_check_settings(config),
        **burst_settings(config),
        **container_settings(config),
    }
    general = for_version(general, config.image.slurm_version)
    text = HEADER + "".join(f"{key}={value}\n" for key, value in general.items())
    text += "\n# Nodes: one line each, so adding a node is a one-line diff.\n"
    return text + node_lines(config) + burst_node_lines(config) + "\n" + partition_lines(config)


# Written for 22.05 only: 24.11 has no such plugin or value (its slurm.conf(5) lists none of
# them, and each unset is the same behaviour: no switch, gather, job completion log, accounting
# or MPI plugin; a cloud node's address always recorded, never cached; cloud nodes always shown).
NOT_IN_2411 = {
    "SwitchType": "switch/none",
    "JobAcctGatherType": "jobacct_gather/none",
    "JobCompType": "jobcomp/none",
    "AccountingStorageType": "accounting_storage/none",
    "MpiDefault": "none",
    "CommunicationParameters": "NoAddrCache",
    "PrivateData": "cloud",
}
# SlurmctldParameters options 24.11 no longer knows (the behaviour is its default).
CTLD_OPTIONS_NOT_IN_2411 = ("cloud_reg_addrs",)


def for_version(settings: dict[str, object], version: tuple[int, int]) -> dict[str, object]:
    """The general settings as the Slurm of `version` takes them."""
    if version < (24, 11):
        return settings
    kept = {key: value for key, value in settings.items() if NOT_IN_2411.get(key) != value}
    options = str(kept["SlurmctldParameters"]).split(",")
    kept["SlurmctldParameters"] = ",".join(o for o in options if o not in CTLD_OPTIONS_NOT_IN_2411)
    return kept


def node_daemon_memory_mb(config: SlurmCluster, node: NodeConfig) -> int:
    """What the node's container holds besides its jobs (its limit is RealMemory plus this):
    every node's daemons, and on the node that runs slurmctld also slurmctld and, with burst,
    the burst programs, so that they never take their room from the jobs there."""
    margin = NODE_DAEMON_MEMORY_MB
    controller = config.controller_node
    if controller is not None and controller.name == node.name:
        margin += CONTROLLER_DAEMON_MEMORY_MB + (BURST_DAEMON_MEMORY_MB if config.burst else 0)
    return margin


def node_lines(config: SlurmCluster) -> str:
    """One NodeName line per node, with its GPUs (and shards) as GRES."""
    gpus = config.gpu_assignment()
    return _lines(
        {
            "NodeName": node.name,
            "NodeAddr": node.nat_address,
            "CPUs": node.cpus,
            "RealMemory": node.memory,
            "Gres": node_gres(len(gpus[node.name]), node.gpu_shards),
            "State": "UNKNOWN",
        }
        for node in config.nodes
    )


def partition_lines(config: SlurmCluster) -> str:
    """The configured partitions, then the burst ones (their cloud nodes power down)."""
    text = _lines(
        {
            "PartitionName": partition.name,
            "Nodes": slurm_hostlist(partition.nodes or config.node_names),
            "Default": partition.default,
            "MaxTime": partition.max_time,
            "OverSubscribe": partition.oversubscribe,
            "State": "UP",
        }
        for partition in config.slurm.partitions
    )
    return text + _lines(
        {
            "PartitionName": partition.name,
            "Nodes": slurm_hostlist(partition.node_names),
            "MaxTime": "INFINITE",
            # Per partition: the global SuspendTime is INFINITE, so only cloud nodes power down.
            "SuspendTime": partition.suspend_time_s,
            "ResumeTimeout": partition.resume_timeout_s,
            "State": "UP",
        }
        for partition in (config.burst.partitions if config.burst else [])
    )


# What slurmd loads at its start only (a change needs a restart of slurmd, not a reconfigure).
SLURMD_START_KEYS = ("ProctrackType", "TaskPlugin", "JobAcctGatherType", "GresTypes")


def slurmd_start_plugins(slurm_conf: str) -> str:
    """The settings of SLURMD_START_KEYS in a rendered slurm.conf, as one line."""
    found = dict(line.split("=", 1) for line in slurm_conf.splitlines() if line.startswith(SLURMD_START_KEYS))
    return " ".join(f"{key}={found[key]}" for key in SLURMD_START_KEYS if key in found)


def node_gres(gpus: int, shards_per_gpu: int) -> str | None:
    """A node's Gres=: its GPUs, and its shards (shards_per_gpu of each GPU) where it has them."""
    if not gpus:
        return None
    return f"gpu:{gpus},shard:{gpus * shards_per_gpu}" if shards_per_gpu else f"gpu:{gpus}"


def default_memory_per_cpu(config: SlurmCluster) -> int:
    """DefMemPerCPU: what a job that does not say --mem gets per CPU, the smallest share of
    any node (memory / CPUs), so that such a job fits every node and a node's jobs together
    never hold more than it has."""
    shares = [node.memory // node.cpus for node in config.nodes]
    shares += [p.memory // p.cpus for p in (config.burst.partitions if config.burst else [])]
    return min(shares, default=1)


def render_cgroup_conf() -> str:
    """cgroup.conf: served with slurm.conf to the configless nodes, the same for 22.05 and 24.11
    (none of its keys is one 24.11 made defunct: CgroupAutomount, ConstrainKmemSpace, ...; both
    versions' slurmd check it in tests/slurm/test_slurm_releases.py). Slurm picks the plugin of
    the cgroup version its node runs (autodetect: v1 on a host with v1 hierarchies, v2 on a
    systemd host); the container gives it its own cgroup tree (components/lxc/lxc_conf.py).
    A job's cgroup holds its cores, its memory with no swap beyond it, and its GPUs: the
    devices of the GRES it was not given are denied."""
    settings = {
        "CgroupPlugin": "autodetect",
        "ConstrainCores": "yes",
        "ConstrainDevices": "yes",
        "ConstrainRAMSpace": "yes",
        "AllowedRAMSpace": 100,
        "ConstrainSwapSpace": "yes",
        "AllowedSwapSpace": 0,
    }
    return HEADER + "".join(f"{key}={value}\n" for key, value in settings.items())


def container_settings(config: SlurmCluster) -> dict[str, object]:
    """Jobs in container images: the prolog that makes each person's Enroot directories
    (components/containers/files/prolog.sh) on every node of a job as it is allocated (Alloc),
    not at its first step there: Pyxis' epilog lists the person's containers on every node of
    the job, and where their directories are missing it fails, which drains the node."""
    return {"Prolog": PROLOG_PROGRAM, "PrologFlags": "Alloc"} if config.containers_enabled else {}


def burst_settings(config: SlurmCluster) -> dict[str, object]:
    """Slurm's power saving for cloud nodes (the Cloud Scheduling Guide): slurmctld runs the
    burst programs, records the address a node registers from (22.05: cloud_reg_addrs, 24.11
    always) and marks a suspended node idle (idle_on_node_suspend: 22.05 has no PowerDownOnIdle)."""
    if not config.burst:
        return {}
    layout = BurstLayout(config.name)
    return {
        "SlurmctldParameters": "enable_configless,cloud_reg_addrs,idle_on_node_suspend",
        "ResumeProgram": layout.program("resume"),
        "SuspendProgram": layout.program("suspend"),
        "ResumeFailProgram": layout.program("resume_fail"),
        "ResumeRate": 0,
        "SuspendRate": 0,
        "SuspendTimeout": 120,
        "SuspendTime": "INFINITE",
        "ResumeTimeout": max(p.resume_timeout_s for p in config.burst.partitions),
        # slurmd's do not know each other's addresses: no fan-out tree.
        "TreeWidth": 65533,
        # srun on a node opens these for the steps' tasks, burst nodes' among them: the host's
        # firewall admits burst nodes on them (components/files/lib/bridges.sh inbound_rules).
        "SrunPortRange": f"{SRUN_PORTS[0]}-{SRUN_PORTS[1]}",
        "TCPTimeout": 10,
        "CommunicationParameters": "NoAddrCache",
        "PrivateData": "cloud",
        "SchedulerParameters": "salloc_wait_nodes,sbatch_wait_nodes",
        "DebugFlags": "Power",
    }


def burst_node_lines(config: SlurmCluster) -> str:
    """The cloud nodes of each burst partition: one line per partition, State=CLOUD."""
    if not config.burst:
        return ""
    return "\n# Burst nodes: EC2 instances Slurm starts on demand (State=CLOUD).\n" + _lines(
        {
            "NodeName": slurm_hostlist(partition.node_names),
            "CPUs": partition.cpus,
            "RealMemory": partition.memory,
            "Gres": f"gpu:{partition.gres_gpus}" if partition.gres_gpus else None,
            "Feature": f"cloud,{partition.name}",
            "Weight": 100,
            "State": "CLOUD",
        }
        for partition in config.burst.partitions
    )


# Where the GPU health check is installed in every node (components/slurm/files/gpu_health.sh).
HEALTH_CHECK_PROGRAM = "/usr/local/sbin/gpucluster-gpu-health"
SLURMDBD_PORT = 6819


def accounting_settings(config: SlurmCluster, munge_socket: str | None = None) -> dict[str, object]:
    """slurmctld records jobs in slurmdbd, counts GPUs as a TRES and enforces limits. Another
    host's client copy names that host's own munge socket (`munge_socket`)."""
    if not config.accounting:
        return {}
    return {
        "AccountingStorageType": "accounting_storage/slurmdbd",
        "AccountingStorageHost": config.accounting.nat_address,
        "AccountingStoragePort": SLURMDBD_PORT,
        # Not a password: with munge, the socket of the munged that signs messages to slurmdbd
        # (AuthInfo covers the rest; without this, clients try munge's default socket).
        "AccountingStoragePass": munge_socket or config.munge_socket,
        "AccountingStorageTRES": "gres/gpu",
        # Jobs of users without an association are refused; GrpTRES and QOS limits hold.
        "AccountingStorageEnforce": "associations,limits,qos",
        # A job's usage (sacct's MaxRSS) read from /proc for the processes its cgroup holds
        # (Slurm's recommended gather: the cgroup one recorded a finished step's usage as 0, and
        # on cgroup v1 needs a cpuacct hierarchy that not every host gives a node). Without
        # accounting nothing would store it, and slurmctld says so as an error.
        "JobAcctGatherType": "jobacct_gather/linux",
        "JobAcctGatherFrequency": 30,
    }


def health_check_settings(config: SlurmCluster) -> dict[str, object]:
    check = config.slurm.health_check
    if not check:
        return {}
    return {
        "HealthCheckProgram": HEALTH_CHECK_PROGRAM,
        "HealthCheckInterval": check.interval_s,
        # Drained nodes too: that is where the check returns a node to service.
        "HealthCheckNodeState": "ANY",
    }


def render_slurmdbd_conf(config: SlurmCluster) -> str:
    """slurmdbd.conf without its StoragePass: the script appends the password from the host's
    file (0400 root), so it never travels as a resource input."""
    accounting = config.accounting
    if not accounting:
        raise ValueError("render_slurmdbd_conf needs cluster.accounting")
    settings = {
        "DbdHost": accounting.name,
        "DbdPort": SLURMDBD_PORT,
        "SlurmUser": "slurm",
        "AuthType": "auth/munge",
        "AuthInfo": f"socket={config.munge_socket}",
        "StorageType": "accounting_storage/mysql",
        "StorageHost": "localhost",
        "StorageUser": "slurm",
        "StorageLoc": "slurm_acct_db",
        "LogFile": "/var/log/slurm/slurmdbd.log",
        "PidFile": pid_file("slurmdbd", config.image.slurm_version),
    }
    return HEADER + "".join(f"{key}={value}\n" for key, value in settings.items())


def render_gres_conf(config: SlurmCluster) -> str:
    """gres.conf: one line per GPU of each node (Debian's Slurm has no NVML autodetect)."""
    burst = config.burst.partitions if config.burst else []
    return HEADER + _lines(
        [
            *(
                {"NodeName": node, "Name": "gpu", "File": container_device_path(path)}
                for node, paths in config.gpu_assignment().items()
                for path in paths
            ),
            # Each GPU's shards, on the node that owns it: a shard job is confined to that GPU.
            *(
                {"NodeName": node.name, "Name": "shard", "Count": node.gpu_shards, "File": container_device_path(path)}
                for node in config.nodes
                if node.gpu_shards
                for path in config.gpu_assignment()[node.name]
            ),
            # An instance's own GPUs, /dev/nvidia0 up.
            *(
                {"NodeName": slurm_hostlist(p.node_names), "Name": "gpu", "File": f"/dev/nvidia{i}"}
                for p in burst
                for i in range(p.gres_gpus)
            ),
        ]
    )
