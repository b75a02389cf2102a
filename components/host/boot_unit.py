"""BootUnit: the cluster's host state made persistent, so a reboot brings the cluster back.

Bridges, their addresses, ip_forward, iptables rules and the host daemons are runtime state:
a reboot drops them. One systemd unit per cluster runs an idempotent bring-up at boot, with
the same shell functions the create scripts use; the containers' own daemons are systemd
units inside them. What the bring-up needs is rendered here, by pure functions of the config;
`verify.sh` checks the host against the same description.
"""

from pathlib import Path

import pulumi

from components.config import ClusterConfig, ClusterHostConfig, ClusterIdentity
from components.options import child_options
from components.sharedfs.shared_fs import mount_state
from components.transport import DEFAULT_LXC_PATH, Transport, host_command, script

FILES = Path(__file__).parent / "files"

UNIT_DIR = "/etc/systemd/system"


def unit_name(config: ClusterIdentity) -> str:
    return f"gpucluster-{config.name}.service"


def boot_paths(config: ClusterIdentity) -> dict[str, str]:
    """The bring-up script and its parameters live in the cluster directory."""
    return {
        "script": f"{config.cluster_dir}/boot.sh",
        "state": f"{config.cluster_dir}/host-state.env",
        "unit": f"{UNIT_DIR}/{unit_name(config)}",
    }


def host_state(
    config: ClusterConfig, host: ClusterHostConfig | None = None, efs_address: str | None = None
) -> dict[str, str]:
    """Everything the cluster owns on one of its hosts (default: its only one), as the
    bring-up and verify read it.

    Lists are space-separated: no item can hold a space (the config types forbid it).
    """
    host = host or config.cluster_hosts[0]
    view = config.for_host(host)
    cluster = config.host_identity(host)
    net = host.network
    here = config.controller_host.name == host.name
    node = config.controller_node if here else None
    # The accounting database's container, started before the nodes; listed only on its host,
    # so clusters without accounting keep their description.
    database_here = config.accounting and config.accounting_host.name == host.name
    accounting = {"DB_CONTAINER": config.container_name(config.accounting.name)} if database_here else {}
    state = {
        "CLUSTER": config.name,
        "CLUSTER_DIR": cluster.cluster_dir,
        "NAT_BRIDGE": net.nat_bridge.name,
        "NAT_ADDRESS": str(net.nat_bridge.address),
        "NAT_SUBNET": str(net.nat_bridge.subnet),
        "CLUSTER_BRIDGE": net.cluster_bridge.name,
        # tag,host_port,address,port[,sources] per forward (sources '+'-separated, when limited)
        "FORWARDS": " ".join(
            f"{config.forward_tag(f.host_port)},{f.host_port},{view.target_address(f.target)},{f.port}"
            + (f",{f.source_list}" if f.allowed_sources else "")
            for f in view.all_forwards
        ),
        "MUNGE_KEY_FILE": f"{cluster.cluster_dir}/munge.key",
        "MUNGE_SOCKET": config.host_munge_socket(host),
        "SLURM_CONF_PATH": f"{cluster.cluster_dir}/slurm.conf",
        # slurmctld on this host (its own conf), or in a node container here
        "CONTROLLER_CONF": f"{cluster.cluster_dir}/controller/slurm.conf" if here and not node else "",
        "CONTROLLER_CONTAINER": config.container_name(node.name) if node else "",
        "IMAGE": config.container_name("image"),
        "NODE_CONTAINERS": " ".join(config.container_name(n) for n in view.node_names),
        "WEB_CONTAINER": config.container_name(view.web_app.name) if view.web_app else "",
        "BOOT_UNIT": boot_paths(cluster)["unit"],
        **accounting,
    }
    # Only where they apply, so a one-host stack's description stays as it was.
    if view.gpu.stand_in:
        # device directory,count: the stand-in GPUs live under the run directory, a tmpfs
        state["STAND_IN_GPUS"] = f"{config.host_device_dir(host)},{view.gpu.stand_in.count}"
    if view.web_app:
        # snapshot directory,interval: the cluster-status writer, a plain daemon on this host
        state["STATUS_WRITER"] = f"{cluster.status_dir},{view.web_app.status_interval_s}"
    if config.metrics_enabled and here:
        # Prometheus's container, and the directory of the cluster exporter, a plain daemon here
        state["METRICS_CONTAINER"] = config.container_name(config.metrics.name)
        state["METRICS_EXPORTER"] = f"{cluster.cluster_dir}/metrics"
    if host.lxc_dir != DEFAULT_LXC_PATH:
        state["LXC_PATH"] = host.lxc_dir
    if config.multi_host:
        # subnet,via per other host: routes to its containers (components/network/files/routes_*)
        state["ROUTES"] = " ".join(f"{subnet},{via}" for subnet, via in config.routes_of(host))
    # The shared filesystem (with shared_fs): its server on the serving host, the mount on each.
    state.update(mount_state(config, host, efs_address))
    return state


def render_host_state(
    config: ClusterConfig, host: ClusterHostConfig | None = None, efs_address: str | None = None
) -> str:
    lines = [f"# What gpu-cluster {config.name} owns on this host (rendered; read by boot.sh and verify.sh)\n"]
    lines += [f"{key}={value}\n" for key, value in host_state(config, host, efs_address).items()]
    return "".join(lines)


def render_boot_unit(config: ClusterIdentity) -> str:
    """Before lxc.service: LXC's autostart finds the bridges already there. The unit starts the
    containers itself (so the same script works on hosts without systemd), hence Delegate."""
    paths = boot_paths(config)
    return (
        "[Unit]\n"
        f"Description=gpu-cluster {config.name}: bridges, firewall rules, host daemons and containers\n"
        "Wants=network-online.target\n"
        "After=network-online.target lxc-net.service\n"
        "Before=lxc.service\n"
        "\n"
        "[Service]\n"
        "Type=oneshot\n"
        "RemainAfterExit=yes\n"
        "Delegate=yes\n"
        f"ExecStart=/bin/bash {paths['script']} {paths['state']}\n"
        "TimeoutStartSec=600\n"
        "\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n"
    )


class BootUnit(pulumi.ComponentResource):
    """The cluster's boot unit, its bring-up script and the description of its host state.

    Builds `<name>-unit`: writes `boot.sh` (the shared helpers + files/boot.sh) and
    `host-state.env` to the cluster directory, and, on hosts with systemd,
    `/etc/systemd/system/gpucluster-<cluster>.service`, enabled. It depends on everything
    else, so it is written last and deleted first: a destroy cut short is not brought back at
    the next boot.
    """

    unit: pulumi.Output[str]
    boot_command: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        cluster: ClusterIdentity,
        host_state: pulumi.Input[str],
        opts: pulumi.ResourceOptions | None = None,
        transport: Transport | None = None,
    ):
        super().__init__("gpu-cluster:host:BootUnit", name, None, opts)
        paths = boot_paths(cluster)
        self.files = host_command(
            f"{name}-unit",
            transport=transport,
            create=FILES / "boot_unit_create.sh",
            delete=FILES / "boot_unit_delete.sh",
            environment={
                "BOOT_SCRIPT": paths["script"],
                "BOOT_SCRIPT_TEXT": script(FILES / "boot.sh"),
                "HOST_STATE": paths["state"],
                "HOST_STATE_TEXT": host_state,
                "UNIT_FILE": paths["unit"],
                "UNIT_TEXT": render_boot_unit(cluster),
            },
            opts=child_options(self, opts),
        )
        self.unit = pulumi.Output.from_input(unit_name(cluster))
        self.boot_command = pulumi.Output.from_input(f"/bin/bash {paths['script']} {paths['state']}")
        self.register_outputs({"unit": self.unit, "boot_command": self.boot_command})
