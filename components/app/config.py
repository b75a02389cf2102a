"""Typed config of the GPU web app in its own container."""

from typing import Annotated

from pydantic import Field, Strict, StringConstraints, model_validator

from components.common.config_types import (
    Address,
    Hostname,
    Network,
    Port,
    SafePath,
    StrictBool,
    StrictInt,
    StrictModel,
)
from components.network.config import SOURCES_DESCRIPTION

# A DNS name in lower case: dot-separated RFC 1123 labels.
DnsName = Annotated[
    str,
    StringConstraints(
        max_length=253, pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$"
    ),
]

# One argv element of a command: not empty, no control character (a newline would end the
# command in the systemd unit and the JSON config line it is written to).
CommandWord = Annotated[str, StringConstraints(pattern=r"^[^\x00-\x1f\x7f]+$", max_length=4096)]


# The app runs as an unprivileged (dynamic) user, which cannot bind a port below 1024.
UnprivilegedPort = Annotated[int, Strict(), Field(ge=1024, le=65535, description="TCP port, 1024-65535")]


class WebAppConfig(StrictModel):
    """The GPU web app: its own container, reached through a host port forward."""

    name: Hostname = Field("web", description="container hostname")
    nat_address: Address = Field(description="static address on the NAT bridge")
    port: UnprivilegedPort = Field(8080, description="the port the app listens on AND the forward's target port")
    host_port: Port = Field(7000, description="host port forwarded to the app")
    job_command: list[CommandWord] = Field(
        ["nvidia-smi"],
        min_length=1,
        description="GPU job the page's Run button (POST /api/run) runs (argv); a labelled CPU fallback when missing",
    )
    max_concurrent_jobs: StrictInt = Field(2, ge=1, le=64, description="jobs running at once")
    job_timeout_s: StrictInt = Field(
        60, ge=1, le=3600, description="a job is killed (with its process group) after this"
    )
    max_connections: StrictInt = Field(
        16,
        ge=2,
        le=256,
        description="requests handled at once by a fixed pool of threads; more wait "
        "(a client still sending its request holds no thread)",
    )
    run_allowed_cidrs: list[Network] = Field(
        [], description="source networks whose clients may run jobs (empty: any client that reaches the app)"
    )
    server_names: list[DnsName] = Field(
        [],
        max_length=32,
        description="DNS names (lower case) the app is reached by: any other name in a request's Host is "
        "refused (421), so a page re-resolved to the app's address gets nothing; IP addresses and "
        "localhost are always accepted",
    )
    gpus: list[SafePath] = Field(
        [],
        description="GPU devices (from gpu.devices) bound into the app's container; no node gets "
        "them unless share_gpus is true. Empty: the app has no GPU (CPU fallback)",
    )
    share_gpus: StrictBool = Field(
        False,
        description="the app's GPUs may also be nodes' GPUs (said explicitly, never by default)",
    )
    allowed_sources: list[Network] = Field([], max_length=32, description=SOURCES_DESCRIPTION)
    status_interval_s: StrictInt = Field(
        5, ge=1, le=300, description="how often the cluster panel's snapshot is written"
    )
    host: Hostname | None = Field(None, description="hosts[].name of the host it runs on (needed with several hosts)")

    @model_validator(mode="after")
    def _connections_above_jobs(self) -> "WebAppConfig":
        if self.max_connections <= self.max_concurrent_jobs:
            raise ValueError(
                f"max_connections ({self.max_connections}) must be greater than max_concurrent_jobs "
                f"({self.max_concurrent_jobs}), so a request beyond the job slots can still be told it is busy"
            )
        return self
