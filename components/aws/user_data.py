"""The first boot of an EC2 host: a cloud-config rendered by a pure function.

It holds no secret (AWS serves user data to anyone allowed ec2:DescribeInstanceAttribute):
the instance makes its own SSH host key, which cloud-init prints to the console where the
program reads it through the EC2 API (components/aws/files/host_key_from_console.sh). It lets
root log in with the stack's key, mounts the state volume at every boot (files/state_volume.sh)
and writes the sshd drop-in that accepts the program's parameters (the same file
`<name>-<host>-sshd-accept-env` manages, so that command finds it in place).
"""

from dataclasses import dataclass
from pathlib import Path

import yaml

FILES = Path(__file__).parent / "files"

# The drop-in of components/files/sshd_accept_env_create.sh, byte for byte.
# The drop-in components/files/sshd_accept_env_create.sh writes for root on an sshd whose own
# config accepts no other names (on an AMI whose does, that script rewrites it once).
ACCEPT_ENV_DROPIN = (
    "# Managed by the gpu-cluster Pulumi program: its parameters arrive as SSH env requests.\n"
    "Match User root\n"
    "  AcceptEnv GPUCLUSTER_* PULUMI_COMMAND_*\n"
)
# The only host key type made, and the only one the connection accepts.
HOST_KEY_TYPE = "ssh-ed25519"
STATE_MOUNT_POINT = "/var/lib/gpucluster-volume"
STATE_DEVICE_NAME = "/dev/sdf"


@dataclass(frozen=True)
class StateVolume:
    """The EBS volume that outlives the instance: its id and the directories kept on it."""

    volume_id: str
    directories: tuple[str, ...]

    @property
    def devices(self) -> tuple[str, ...]:
        """Where it shows up: NVMe instances name it by its id, others by its attachment name."""
        nvme = f"/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_{self.volume_id.replace('-', '')}"
        return (nvme, "/dev/xvdf", STATE_DEVICE_NAME)

    @property
    def bind_order(self) -> list[str]:
        """The directories, each once, a parent before anything inside it."""
        return sorted(set(self.directories), key=lambda path: (path.count("/"), path))


def render_user_data(cluster: str, authorized_key: str, volume: StateVolume) -> str:
    """#cloud-config for an EC2 host of `cluster`: a fresh ed25519 host key printed to the
    console, root's authorized key, the state volume's mounts and the AcceptEnv drop-in."""
    config = {
        # bootcmd runs at every boot, before the ssh module and sshd: the state directories
        # are on the volume before anything writes to them. Arguments travel as argv.
        "bootcmd": [
            [
                "sh",
                "-c",
                (FILES / "state_volume.sh").read_text(),
                "gpucluster-state-volume",
                STATE_MOUNT_POINT,
                " ".join(volume.devices),
                *volume.bind_order,
            ]
        ],
        # Only a host key made on the instance: the AMI's are deleted, ed25519 is generated,
        # and cloud-init prints its public half to the console (the program pins that).
        "ssh_deletekeys": True,
        "ssh_genkeytypes": ["ed25519"],
        "ssh": {"emit_keys_to_console": True},
        "ssh_key_console_blacklist": [],
        # The scripts run as root; sshd's default (prohibit-password) allows only keys.
        "disable_root": False,
        "ssh_authorized_keys": [authorized_key.strip()],
        "write_files": [
            {
                "path": f"/etc/ssh/sshd_config.d/gpucluster-{cluster}.conf",
                "owner": "root:root",
                "permissions": "0644",
                "content": ACCEPT_ENV_DROPIN,
            }
        ],
    }
    return "#cloud-config\n" + yaml.safe_dump(config, sort_keys=False, width=4096)
