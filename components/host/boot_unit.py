"""BootUnit: the cluster's host state made persistent, so a reboot brings the cluster back.

Bridges, their addresses, ip_forward, iptables rules and the host daemons are runtime state:
a reboot drops them. One systemd unit per cluster runs an idempotent bring-up at boot, with
the same shell functions the create scripts use; the containers' own daemons are systemd
units inside them. What the bring-up needs (the host state) is rendered by pure functions of
the cluster's config in components/composition/host_state.py; `verify.sh` checks the host against the same
description.
"""

from pathlib import Path

import pulumi

from components.common.config_types import ClusterIdentity
from components.common.options import child_options
from components.common.transport import Transport, host_command, script

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
