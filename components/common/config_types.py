"""Shared building blocks for the typed stack config.

Every model forbids unknown keys, so a typo in a stack file is an error that names the key,
not a silently ignored setting. Strings that end up in host files (LXC config lines,
slurm.conf, iptables comments) are constrained here, so no config value can smuggle a
newline, a space or a shell metacharacter into them.
"""

import re
import socket
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Interface, IPv4Network
from typing import Annotated

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, Strict, StringConstraints


class StrictModel(BaseModel):
    """Base of every config model: unknown keys are rejected, values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


# Numbers and flags are taken as they are written: "2", 2.0 and true are not integers, "yes"
# is not a boolean (a quoted or mistyped value is an error, not a silent conversion).
# Patterns below use [0-9] and [a-z], never \d or \w, which also match non-ASCII digits/letters.
StrictInt = Annotated[int, Strict()]
StrictBool = Annotated[bool, Strict()]

# A burst partition's node memory (its RealMemory, in MB) where the stack sets none: per CPU.
DEFAULT_MEMORY_MB_PER_CPU = 1024


def written_as_text(value):
    """Addresses and networks are text: a number (`address: 10`) is a typo, not 0.0.0.10."""
    if isinstance(value, (int, float)):
        raise ValueError(f"{value!r} is a number; write the address as text, e.g. 10.0.0.2 or 10.0.0.0/24")
    return value


Address = Annotated[IPv4Address, BeforeValidator(written_as_text)]
Network = Annotated[IPv4Network, BeforeValidator(written_as_text)]
Interface = Annotated[IPv4Interface, BeforeValidator(written_as_text)]


# RFC 1123 label in lower case: valid as a hostname, an LXC container name and a Slurm
# NodeName. Upper case is refused because Slurm and DNS would disagree about it.
Hostname = Annotated[
    str,
    StringConstraints(pattern=r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$"),
    Field(description="lower-case hostname label: a-z, 0-9 and '-', starting with a letter"),
]

# Linux interface names: at most 15 bytes (IFNAMSIZ - 1), no '/', ':' or whitespace.
InterfaceName = Annotated[
    str,
    StringConstraints(pattern=r"^[a-zA-Z][a-zA-Z0-9_.-]{0,14}$"),
    Field(description="network interface name, at most 15 characters"),
]

Port = Annotated[int, Strict(), Field(ge=1, le=65535, description="TCP port, 1-65535")]

# `PartitionName=DEFAULT` is Slurm 22.05's defaults line, not a partition (case-insensitive):
# never a name of slurm.partitions or burst.partitions.
SLURM_RESERVED_PARTITION_NAMES = frozenset({"default"})


def _check_absolute_path(value: str) -> str:
    if not value.startswith("/"):
        raise ValueError(f"{value!r} must be an absolute path")
    if "/../" in f"{value}/" or "/./" in f"{value}/" or "//" in value:
        raise ValueError(f"{value!r} must be a normalised path (no '.', '..' or '//')")
    return value.rstrip("/") or "/"


# Absolute path made of characters that are safe in an LXC config line and a shell word.
SafePath = Annotated[
    str,
    StringConstraints(pattern=r"^[A-Za-z0-9._/+@-]+$", max_length=255),
    AfterValidator(_check_absolute_path),
    Field(description="absolute path of letters, digits and . _ / + @ -"),
]

# Debian package names (policy 5.6.1).
PackageName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9+.-]+$")]

# SafePath that may hold glob characters (* ? [ ]), expanded on the host by the scripts.
SafeGlob = Annotated[
    str,
    StringConstraints(pattern=r"^[A-Za-z0-9._/+@*?\[\]-]+$", max_length=255),
    AfterValidator(_check_absolute_path),
    Field(description="absolute path or glob pattern of letters, digits and . _ / + @ - * ? [ ]"),
]


# Slurm's largest time: time_str2secs sums days/hours/minutes/seconds in a C int, and a sum
# past it wraps negative (slurmctld then refuses the partition).
SLURM_MAX_SECONDS = 2**31 - 1 - 59


def slurm_seconds(value: str) -> int | None:
    """A Slurm time in seconds (None: INFINITE or UNLIMITED)."""
    if value in ("INFINITE", "UNLIMITED"):
        return None
    days, _, clock = value.rpartition("-")
    parts = [int(part) for part in clock.split(":")]
    if days:
        hours, minutes, seconds = [*parts, 0, 0][:3]
    elif len(parts) == 3:
        hours, minutes, seconds = parts
    else:
        hours, (minutes, seconds) = 0, [*parts, 0][:2]
    return int(days or 0) * 86400 + hours * 3600 + minutes * 60 + seconds


def _check_slurm_time(value: str) -> str:
    total = slurm_seconds(value)
    if total is not None and total > SLURM_MAX_SECONDS:
        raise ValueError(f"{value!r} is longer than Slurm can count ({SLURM_MAX_SECONDS} seconds)")
    return value


# Slurm time: INFINITE, UNLIMITED, minutes, minutes:seconds, hours:minutes:seconds, days-hours,
# days-hours:minutes or days-hours:minutes:seconds, in ASCII digits.
SlurmTime = Annotated[
    str,
    StringConstraints(pattern=r"^(INFINITE|UNLIMITED|[0-9]{1,10}(-[0-9]{1,10})?(:[0-9]{1,10}){0,2})$"),
    AfterValidator(_check_slurm_time),
    Field(description="INFINITE, minutes[:seconds], hours:minutes:seconds or days-hours[:minutes[:seconds]]"),
]

# Login names: what useradd and Slurm both accept (Slurm keeps names in lower case).
UserName = Annotated[str, StringConstraints(pattern=r"^[a-z_][a-z0-9_-]{0,31}$")]


# A DNS name (RFC 1123 labels) whose last label is not all digits (RFC 3696 2), so that no name
# is also read as an address.
_DNS_NAME = re.compile(
    r"^(?=.{1,253}$)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*[A-Za-z]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$"
)


def _reads_as_address(value: str) -> bool:
    """What the C resolver takes as an IPv4 address: also 127.1, 2130706433, 0x7f.1, 127.000.000.001."""
    try:
        socket.inet_aton(value)
    except OSError:
        return False
    return True


def check_host_address(value: str) -> str:
    """An IPv4 address in dotted decimal or a DNS name (a host to dial: SSH, NFS)."""
    try:
        return str(IPv4Address(value))
    except ValueError:
        pass
    if _reads_as_address(value) or not _DNS_NAME.match(value):
        raise ValueError(
            f"{value!r} is neither an IPv4 address in dotted decimal (e.g. 192.168.10.12) nor a DNS name "
            "(letters, digits and '-' in dot-separated labels, the last one not all digits)"
        )
    return value


def duplicates(values: Iterable) -> list:
    """The values listed more than once (for the rules on unique names and addresses)."""
    return [value for value, count in Counter(values).items() if count > 1]


def is_within(path: str, tree: str) -> bool:
    """`path` is `tree` or below it (both normalised absolute paths)."""
    return path == tree or path.startswith(tree.rstrip("/") + "/")


def related(path: str, other: str) -> bool:
    """One of the two paths contains the other (or they are equal)."""
    return is_within(path, other) or is_within(other, path)


# What destroy deliberately keeps lives here, one directory per cluster; purge-kept.sh removes it.
KEEP_DIR = "/var/cache/gpucluster"


def guard_tag(cluster: str, what: str) -> str:
    """The iptables comment of a firewall guard (components/files/lib/guards.sh): its delete,
    the boot unit and verify find its rules by it."""
    return f"gpucluster:{cluster}:guard:{what}"


@dataclass(frozen=True)
class ClusterIdentity:
    """What every component of a cluster derives its names and paths from."""

    name: str
    cluster_dir: str
    munge_socket: str
    host: str | None = None
    """The host's name in a cluster of several hosts (its kept files have their own folder)."""

    @property
    def status_dir(self) -> str:
        """Host directory of the cluster snapshot: written on the host (the boot unit restarts
        its writer), mounted read-only in the web app."""
        return f"{self.cluster_dir}/status"

    @property
    def kept_dir(self) -> str:
        """What destroy keeps of this cluster on purpose (purge-kept.sh removes it); per host
        where several hosts may share a filesystem."""
        return f"{KEEP_DIR}/{self.name}" + (f"/{self.host}" if self.host else "")

    def container_name(self, hostname: str) -> str:
        """LXC name: prefixed, so two clusters (or a site's own containers) never collide."""
        return f"{self.name}-{hostname}"

    def forward_tag(self, host_port: int) -> str:
        """The iptables comment on every rule of a forward (delete and verify find them by it)."""
        return f"gpucluster:{self.name}:fwd:{host_port}"
