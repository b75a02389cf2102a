"""The first boot of an EC2 host: a cloud-config rendered by a pure function.

It installs the SSH host key the program generated (so the connection pins a key known
before the machine exists), lets root log in with the stack's key, and writes the sshd
drop-in that accepts the program's parameters (the same file `<name>-<host>-sshd-accept-env`
manages, so that command finds it in place). The host key makes the user data secret.
"""

import yaml

# The drop-in of components/files/sshd_accept_env_create.sh, byte for byte.
ACCEPT_ENV_DROPIN = (
    "# Managed by the gpu-cluster Pulumi program: its parameters arrive as SSH env requests.\n"
    "AcceptEnv GPUCLUSTER_* PULUMI_COMMAND_*\n"
)


def render_user_data(cluster: str, host_private_key: str, host_public_key: str, authorized_key: str) -> str:
    """#cloud-config for an EC2 host of `cluster`: its ed25519 host key (OpenSSH format), root's
    authorized key, and the AcceptEnv drop-in. Nothing else: the host graph does the rest."""
    config = {
        # Only the program's host key: the AMI's are deleted, and ed25519, the only type to make,
        # exists already (ssh_keys), so nothing is generated.
        "ssh_deletekeys": True,
        "ssh_genkeytypes": ["ed25519"],
        "ssh_keys": {
            "ed25519_private": host_private_key,
            "ed25519_public": host_public_key.strip(),
        },
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
