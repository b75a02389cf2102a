"""The user data of a burst node: files/boot_node.sh with the cluster's values filled in.

The launch templates carry it without a node name; the resume program fills NODE_PLACEHOLDER
in each launch's copy. No secret goes in: anyone allowed ec2:DescribeLaunchTemplateVersions
or DescribeInstanceAttribute reads user data."""

import re
from ipaddress import IPv4Address
from pathlib import Path

FILES = Path(__file__).parent / "files"
NODE_PLACEHOLDER = "@NODE_NAME@"
SAFE = re.compile(r"^[A-Za-z0-9._:/-]*$")


def render_user_data(
    controller: IPv4Address, region: str, secret_id: str, endpoint: str | None, munge_socket: str
) -> str:
    """The boot script of every burst node of the cluster, its node name left to the launch."""
    values = {
        "@CONTROLLER@": str(controller),
        "@REGION@": region,
        "@SECRET_ID@": secret_id,
        "@ENDPOINT@": endpoint or "",
        "@MUNGE_SOCKET@": munge_socket,
    }
    text = (FILES / "boot_node.sh").read_text()
    for placeholder, value in values.items():
        if not SAFE.match(value):  # values go into shell assignments unquoted
            raise ValueError(f"{placeholder}: {value!r} is not safe in the boot script")
        text = text.replace(placeholder, value)
    return text


def for_node(user_data: str, node: str) -> str:
    """The launch's own copy: the node's name in place of the placeholder."""
    return user_data.replace(NODE_PLACEHOLDER, node)
