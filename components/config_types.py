"""Shared building blocks for the typed stack config.

Every model forbids unknown keys, so a typo in a stack file is an error that names the key,
not a silently ignored setting. Strings that end up in host files (LXC config lines,
slurm.conf, iptables comments) are constrained here, so no config value can smuggle a
newline, a space or a shell metacharacter into them.
"""

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints


class StrictModel(BaseModel):
    """Base of every config model: unknown keys are rejected, values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


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

Port = Annotated[int, Field(ge=1, le=65535, description="TCP port, 1-65535")]


def _check_absolute_path(value: str) -> str:
    if not value.startswith("/"):
        raise ValueError(f"{value!r} must be an absolute path")
    if "/../" in f"{value}/" or "//" in value:
        raise ValueError(f"{value!r} must be a normalised path (no '..' or '//')")
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
