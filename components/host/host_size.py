"""The host's size (its memory and CPUs), measured on the host once and kept in the state."""

import re
from dataclasses import dataclass
from pathlib import Path

import pulumi

from components.common.transport import Transport, host_command

FILES = Path(__file__).parent / "files"
_SIZE = re.compile(r"^memory_mb=(-?\d+) cpus=(\d+)$")


@dataclass(frozen=True)
class HostSize:
    """What host_size_create.sh printed: the host's memory in MB (less what containers of other
    clusters hold as their limits) and its online CPUs."""

    memory_mb: int
    cpus: int


def parse_host_size(stdout: str) -> HostSize:
    """The measure's one stdout line, e.g. `memory_mb=257000 cpus=64`."""
    found = _SIZE.match((stdout or "").strip())
    if not found:
        raise ValueError(f"the host's size could not be read from {stdout!r} (memory_mb=N cpus=N expected)")
    return HostSize(int(found.group(1)), int(found.group(2)))


def measure_host(
    name: str, nat_bridge: str, transport: Transport | None, opts: pulumi.ResourceOptions
) -> pulumi.Output[HostSize]:
    """The command that measures the host, once: a change of its script or inputs is ignored
    (an upgrade never changes a node's memory behind the operator's back), so only a replace of
    `name` measures again. Run as a check (before the script store, like the preflight)."""
    made = host_command(
        name,
        transport=transport,
        create=FILES / "host_size_create.sh",
        environment={"NAT_BRIDGE": nat_bridge},
        check=True,
        opts=pulumi.ResourceOptions.merge(
            opts, pulumi.ResourceOptions(ignore_changes=["create", "environment", "connection"])
        ),
    )
    return made.stdout.apply(parse_host_size)
