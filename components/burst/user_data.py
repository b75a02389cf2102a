"""The user data of a burst node: files/boot_node.sh with the cluster's values filled in.

The launch templates carry it without a node name; the resume program fills NODE_PLACEHOLDER
in each launch's copy. No secret goes in: anyone allowed ec2:DescribeLaunchTemplateVersions
or DescribeInstanceAttribute reads user data."""

import re
from ipaddress import IPv4Address
from pathlib import Path

FILES = Path(__file__).parent / "files"
# The shared shell helpers (components/files/lib): the boot takes the functions it names in a
# `#@LIB FILE FUNCTION...@` line from there, so a burst node checks and makes users[] with the
# same code as every other node. Only those functions: user data is at most 16 KiB.
LIB = Path(__file__).parents[1] / "files" / "lib"
LIB_LINE = re.compile(r"^#@LIB (\S+) ([^@]+)@$", re.MULTILINE)
USER_DATA_LIMIT = 16384  # bytes, EC2's limit before base64
NODE_PLACEHOLDER = "@NODE_NAME@"
SAFE = re.compile(r"^[A-Za-z0-9._:/-]*$")
# NAME:UID:GID:GROUP of each person (users[]), comma-separated.
PERSON = r"[a-z_][a-z0-9_-]*:[0-9]+:[0-9]+:[a-z_][a-z0-9_-]*"
PEOPLE = re.compile(rf"^({PERSON}(,{PERSON})*)?$")


def lib_functions(file: str, names: list[str]) -> str:
    """The text of these functions of a helper file (each from `NAME() {` to its closing `}`)."""
    text = (LIB / file).read_text()
    parts = []
    for name in names:
        found = re.search(rf"^{re.escape(name)}\(\) \{{\n.*?^\}}\n", text, re.MULTILINE | re.DOTALL)
        if not found:
            raise ValueError(f"lib/{file} has no function {name}")
        parts.append(found.group(0))
    return f"# ---- lib/{file}: {' '.join(names)} ----\n{''.join(parts)}# ----\n"


def render_user_data(
    controller: IPv4Address,
    region: str,
    secret_id: str,
    endpoint: str | None,
    munge_socket: str,
    people: list[str] | tuple[str, ...] = (),
    shared_dir: str = "",
    shared_mount: str = "",
) -> str:
    """The boot script of every burst node of the cluster, its node name left to the launch.
    `people`: the cluster's users (NAME:UID:GID:GROUP), made on the node as on every other;
    `shared_dir` and `shared_mount` (SERVER:PORT:EXPORT, or empty): the shared filesystem the
    node mounts there, as the hosts do (none: the directory stays local to the instance)."""
    values = {
        "@CONTROLLER@": str(controller),
        "@REGION@": region,
        "@SECRET_ID@": secret_id,
        "@ENDPOINT@": endpoint or "",
        "@MUNGE_SOCKET@": munge_socket,
        "@SHARED_DIR@": shared_dir,
        "@SHARED_MOUNT@": shared_mount,
    }
    text = LIB_LINE.sub(lambda m: lib_functions(m.group(1), m.group(2).split()), (FILES / "boot_node.sh").read_text())
    people_text = ",".join(people)
    if not PEOPLE.match(people_text):
        raise ValueError(f"@PEOPLE@: {people_text!r} is not safe in the boot script")
    text = text.replace("@PEOPLE@", people_text)
    for placeholder, value in values.items():
        if not SAFE.match(value):  # values go into shell assignments unquoted
            raise ValueError(f"{placeholder}: {value!r} is not safe in the boot script")
        text = text.replace(placeholder, value)
    if len(text.encode()) > USER_DATA_LIMIT - 1024:  # room for the node's name and growth
        raise ValueError(f"the burst boot script is {len(text.encode())} bytes: EC2 takes {USER_DATA_LIMIT} at most")
    return text


def for_node(user_data: str, node: str) -> str:
    """The launch's own copy: the node's name in place of the placeholder."""
    return user_data.replace(NODE_PLACEHOLDER, node)
