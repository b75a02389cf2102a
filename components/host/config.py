"""Typed config of a host: its directories, the people made on it, and how it is reached."""

import base64
import binascii
from ipaddress import IPv4Address
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, Strict

from components.common.config_types import (
    Port,
    SafePath,
    StrictBool,
    StrictInt,
    StrictModel,
    UserName,
    check_host_address,
)

# What one GPU-hour of a host costs, for the cost of jobs in ./status.sh (nothing is built from it).
GpuHourPrice = Annotated[
    float,
    Strict(),
    Field(
        ge=0,
        le=10000,
        description="USD per GPU-hour of this host's GPUs, for the cost per job and account in ./status.sh "
        "(GPU-hours from sacct times this price); 0 (default): owned GPUs counted as free, and on an EC2 host "
        "the instance's hourly price (components/aws/prices.py, aws.prices) divided by its GPUs",
    ),
]


class HostConfig(StrictModel):
    """The machine the cluster is built on."""

    state_dir: SafePath = Field(
        "/var/lib/gpucluster",
        description="where per-cluster state lives (munge key, rendered configs, markers)",
    )
    shared_dir: SafePath = Field(
        description="host directory bind-mounted at the same path in every node and the web "
        "app, so a job script written there once runs anywhere",
    )
    install_packages: StrictBool = Field(True, description="install the Debian packages the host needs (apt-get)")
    gpu_hour_price: GpuHourPrice = 0.0


# Names of system accounts and groups, never a person's: Debian's base-passwd (its users and
# groups, nobody and nogroup included), the accounts of the daemons the program installs on the
# host and in the containers (Slurm, munge, MariaDB, LXC's dnsmasq, sshd, D-Bus, polkit), and
# Debian's prefixes for system accounts (systemd-*, _*).
BASE_PASSWD_USERS = "root daemon bin sys sync games man lp mail news uucp proxy www-data backup list irc gnats nobody"
BASE_PASSWD_GROUPS = (
    "adm tty disk kmem dialout fax voice cdrom floppy tape sudo audio dip operator src shadow utmp video "
    "sasl plugdev staff users nogroup"
)
DAEMON_ACCOUNTS = "slurm munge mysql dnsmasq lxc-dnsmasq sshd messagebus polkitd uuidd tss"
SYSTEM_ACCOUNTS = frozenset(" ".join((BASE_PASSWD_USERS, BASE_PASSWD_GROUPS, DAEMON_ACCOUNTS)).split())
SYSTEM_ACCOUNT_PREFIXES = ("systemd-", "_")


def is_system_account(name: str) -> bool:
    return name in SYSTEM_ACCOUNTS or name.startswith(SYSTEM_ACCOUNT_PREFIXES)


# Ids of people, never of system accounts (below 1000) or nobody (65534).
PersonId = Annotated[int, Strict(), Field(ge=1000, le=60000)]


# An SSH public key as OpenSSH prints it (`ssh-keyscan`, /etc/ssh/ssh_host_*_key.pub), comment dropped.
HOST_KEY_PATTERN = r"^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)) [A-Za-z0-9+/]+={0,3}$"

# What the key blob of each type holds after its type name (RFC 4253 6.6, RFC 5656 3.1,
# RFC 8709 4): the number of fields, and a check of them.
_EC_POINT_BYTES = {"nistp256": 65, "nistp384": 97, "nistp521": 133}


def _ssh_fields(blob: bytes) -> list[bytes]:
    """The length-prefixed strings an SSH key blob is made of (ValueError if it is not)."""
    fields = []
    while blob:
        if len(blob) < 4 or len(blob) < 4 + int.from_bytes(blob[:4], "big"):
            raise ValueError("is cut short")
        size = int.from_bytes(blob[:4], "big")
        fields.append(blob[4 : 4 + size])
        blob = blob[4 + size :]
    return fields


def _key_problem(kind: str, fields: list[bytes]) -> str | None:
    if not fields:
        return "is empty"
    if fields[0] != kind.encode():
        return f"holds no {kind} key (it names {fields[0][:40].decode('ascii', 'replace')!r})"
    if kind == "ssh-ed25519":
        return None if len(fields) == 2 and len(fields[1]) == 32 else "is not a 32-byte Ed25519 key"
    if kind == "ssh-rsa":
        if len(fields) != 3 or not fields[1] or not fields[2]:
            return "is not an RSA key (exponent and modulus)"
        bits = int.from_bytes(fields[2], "big").bit_length()
        return None if bits >= 1024 else f"is a {bits}-bit RSA key; OpenSSH refuses keys below 1024 bits"
    curve = kind.removeprefix("ecdsa-sha2-")
    if len(fields) != 3 or fields[1] != curve.encode() or len(fields[2]) != _EC_POINT_BYTES[curve] or fields[2][0] != 4:
        return f"is not an ECDSA {curve} key (curve name and uncompressed point)"
    return None


def _key_data_problem(kind: str, data: str) -> str | None:
    """What is wrong with a key's base64 part for the type the first word names (None: a key)."""
    try:
        fields = _ssh_fields(base64.b64decode(data, validate=True))
    except (binascii.Error, ValueError) as error:
        return f"of {kind!r} is not a key: {error}"
    return _key_problem(kind, fields)


def _check_host_key(value: str) -> str:
    """The base64 part decodes to a key of the type the first word names."""
    kind, data = value.split(" ")
    problem = _key_data_problem(kind, data)
    if problem:
        raise ValueError(f"the key data {problem}; copy the key from /etc/ssh/ssh_host_*_key.pub or ssh-keyscan")
    return value


# A person's public key as in ~/.ssh/id_*.pub: type, key data, and an optional comment (no
# control character: one key, one line of authorized_keys; no option prefix).
AUTHORIZED_KEY_PATTERN = (
    r"^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)) [A-Za-z0-9+/]+={0,3}( [^\x00-\x1f\x7f]{1,200})?$"
)


def _check_authorized_key(value: str) -> str:
    kind, data = value.split(" ")[:2]
    problem = _key_data_problem(kind, data)
    if problem:
        raise ValueError(f"the key data {problem}; copy the whole line of the person's ~/.ssh/id_*.pub")
    return value


AuthorizedKey = Annotated[
    str,
    Field(pattern=AUTHORIZED_KEY_PATTERN, max_length=16384),
    AfterValidator(_check_authorized_key),
]


class UserConfig(StrictModel):
    """A person: the same name, uid and gid on the host and in every container of the cluster."""

    name: UserName = Field(description="login name")
    uid: PersonId = Field(description="user id, 1000-60000")
    gid: PersonId = Field(description="primary group id, 1000-60000")
    group: UserName | None = Field(None, description="primary group name (default: the user's name)")
    ssh_keys: list[AuthorizedKey] = Field(
        [],
        max_length=32,
        description="OpenSSH public keys (a line of ~/.ssh/id_*.pub) the person logs in to the login node with; "
        "none: no login there",
    )

    @property
    def group_name(self) -> str:
        return self.group or self.name

    @property
    def spec(self) -> str:
        """NAME:UID:GID:GROUP, as the scripts take a person (components/files/lib/people.sh)."""
        return f"{self.name}:{self.uid}:{self.gid}:{self.group_name}"


def same_machine_key(address: str | None) -> str:
    """What two SSH addresses (None: the local host) are compared by to tell one machine:
    every loopback address and localhost name is this machine; names compare in lower case."""
    if address is None:
        return "localhost"
    name = address.lower()
    if name == "localhost" or name.endswith(".localhost"):
        return "localhost"
    try:
        ip = IPv4Address(name)
    except ValueError:
        return name
    return "localhost" if ip.is_loopback else str(ip)


class LocalConnection(StrictModel):
    """Commands run on the machine that runs `pulumi up`."""

    kind: Literal["local"] = "local"


class SshEndpoint(StrictModel):
    """An SSH server, its host key pinned: a host presenting another key is refused."""

    address: Annotated[str, AfterValidator(check_host_address)] = Field(
        pattern=r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,252})$", description="IPv4 address or DNS name of the SSH server"
    )
    port: Port = Field(22, description="SSH port")
    user: str = Field("root", pattern=r"^[a-z_][a-z0-9_-]{0,31}$", description="login user (root: scripts need it)")
    host_key: Annotated[str, AfterValidator(_check_host_key)] = Field(
        pattern=HOST_KEY_PATTERN,
        description="the server's public host key, e.g. the first two fields of /etc/ssh/ssh_host_ed25519_key.pub",
    )


class SshConnection(SshEndpoint):
    """Commands run over SSH (pulumi-command remote.Command)."""

    kind: Literal["ssh"]
    private_key_secret: str = Field(
        pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,63}$",
        description="name of the stack's secret config key holding the private key "
        "(`pulumi config set --secret NAME < key`); it never appears in the stack file",
    )
    bastion: SshEndpoint | None = Field(None, description="jump host (same private key) when the host is not reachable")
    dial_error_limit: StrictInt = Field(
        10,
        ge=-1,
        le=1000,
        description="failed dials of a command before giving up (-1: forever; a host key mismatch "
        "or a refused login is retried like any other dial error)",
    )
