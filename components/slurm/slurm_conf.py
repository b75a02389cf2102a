"""slurm.conf and gres.conf for Slurm 22.05, rendered from the cluster config.

Pure functions: the text is a resource input, so `pulumi preview` shows its line diff.
Node lines and gres.conf are built from the same GPU assignment, so a node's `Gres=gpu:N`
and its gres.conf `File=` lines cannot disagree.
"""

from collections.abc import Iterable, Mapping

from components.config import ClusterConfig
from components.rendering import HEADER, container_device_path
from components.slurm.config import slurm_hostlist

SLURMCTLD_PORT = 6817


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


def controller_paths(config: ClusterConfig) -> dict[str, str]:
    """Where slurmctld keeps its state: Debian's paths in a container, the cluster dir on a host."""
    if config.controller_node:
        return {
            "StateSaveLocation": "/var/lib/slurm/slurmctld",
            "SlurmctldPidFile": "/run/slurmctld.pid",
            "SlurmctldLogFile": "/var/log/slurm/slurmctld.log",
        }
    base = config.cluster_dir
    return {
        "StateSaveLocation": f"{base}/slurmctld",
        "SlurmctldPidFile": f"{base}/slurmctld.pid",
        "SlurmctldLogFile": f"{base}/slurmctld.log",
    }


def render_slurm_conf(config: ClusterConfig, controller_hostname: str, munge_socket: str | None = None) -> str:
    """slurm.conf: served to every slurmd by the controller (configless mode). Another host's
    client copy names that host's own munge socket (`munge_socket`)."""
    gpus = config.gpu_assignment()
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
        "SlurmdPort": 6818,
        **controller_paths(config),
        "SlurmdSpoolDir": "/var/lib/slurm/slurmd",
        "SlurmdPidFile": "/run/slurmd.pid",
        "SlurmdLogFile": "/var/log/slurm/slurmd.log",
        # No cgroup delegation inside LXC: track processes by /proc, no task containment.
        "ProctrackType": "proctrack/linuxproc",
        "TaskPlugin": "task/none",
        "SelectType": "select/cons_tres",
        "SelectTypeParameters": "CR_Core",
        "SchedulerType": "sched/backfill",
        "GresTypes": "gpu",
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
    }
    text = HEADER + "".join(f"{key}={value}\n" for key, value in general.items())
    text += "\n# Nodes: one line each, so adding a node is a one-line diff.\n"
    text += _lines(
        {
            "NodeName": node.name,
            "NodeAddr": node.nat_address,
            "CPUs": node.cpus,
            "Gres": f"gpu:{len(gpus[node.name])}" if gpus[node.name] else None,
            "State": "UNKNOWN",
        }
        for node in config.nodes
    )
    text += "\n"
    text += _lines(
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
    return text


# Where the GPU health check is installed in every node (components/slurm/files/gpu_health.sh).
HEALTH_CHECK_PROGRAM = "/usr/local/sbin/gpucluster-gpu-health"
SLURMDBD_PORT = 6819


def accounting_settings(config: ClusterConfig, munge_socket: str | None = None) -> dict[str, object]:
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
        # Reads /proc: works in LXC, where the cgroup plugin has no delegated hierarchy.
        "JobAcctGatherType": "jobacct_gather/linux",
        "JobAcctGatherFrequency": 30,
    }


def health_check_settings(config: ClusterConfig) -> dict[str, object]:
    check = config.slurm.health_check
    if not check:
        return {}
    return {
        "HealthCheckProgram": HEALTH_CHECK_PROGRAM,
        "HealthCheckInterval": check.interval_s,
        # Drained nodes too: that is where the check returns a node to service.
        "HealthCheckNodeState": "ANY",
    }


def render_slurmdbd_conf(config: ClusterConfig) -> str:
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
        "PidFile": "/run/slurmdbd.pid",
    }
    return HEADER + "".join(f"{key}={value}\n" for key, value in settings.items())


def render_gres_conf(config: ClusterConfig) -> str:
    """gres.conf: one line per GPU of each node (Debian's Slurm has no NVML autodetect)."""
    return HEADER + _lines(
        {"NodeName": node, "Name": "gpu", "File": container_device_path(path)}
        for node, paths in config.gpu_assignment().items()
        for path in paths
    )
