"""slurm.conf and gres.conf for Slurm 22.05, rendered from the cluster config.

Pure functions: the text is a resource input, so `pulumi preview` shows its line diff.
Node lines and gres.conf are built from the same GPU assignment, so a node's `Gres=gpu:N`
and its gres.conf `File=` lines cannot disagree.
"""

from collections.abc import Iterable, Mapping

import hostlist

from components.config import ClusterConfig

HEADER = "# Managed by the gpu-cluster Pulumi program; local edits are overwritten.\n"

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


def render_slurm_conf(config: ClusterConfig, controller_hostname: str) -> str:
    """slurm.conf: served to every slurmd by the controller (configless mode)."""
    gpus = config.gpu_assignment()
    general = {
        "ClusterName": config.name,
        "SlurmctldHost": f"{controller_hostname}({config.controller_address})",
        # Nodes fetch slurm.conf and gres.conf from slurmctld, so adding a node never
        # rewrites a file on the other nodes.
        "SlurmctldParameters": "enable_configless",
        "AuthType": "auth/munge",
        "CredType": "cred/munge",
        "AuthInfo": f"socket={config.munge_socket}",
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
            "Nodes": hostlist.collect_hostlist(partition.nodes or config.node_names),
            "Default": partition.default,
            "MaxTime": partition.max_time,
            "OverSubscribe": partition.oversubscribe,
            "State": "UP",
        }
        for partition in config.slurm.partitions
    )
    return text


def container_device_path(host_path: str) -> str:
    """A GPU device appears in the container as /dev/<basename of the host node>."""
    return "/dev/" + host_path.rsplit("/", 1)[-1]


def render_gres_conf(config: ClusterConfig) -> str:
    """gres.conf: one line per GPU of each node (Debian's Slurm has no NVML autodetect)."""
    return HEADER + _lines(
        {"NodeName": node, "Name": "gpu", "File": container_device_path(path)}
        for node, paths in config.gpu_assignment().items()
        for path in paths
    )
