"""Typed config of jobs in container images: Pyxis (`srun --container-image`) and Enroot on
every node, the registries people pull from, and where each node keeps their images."""

from typing import Annotated

from pydantic import Field, StringConstraints, field_validator

from components.common.config_types import Address, Hostname, Port, SafePath, StrictBool, StrictInt, StrictModel

# Where people can write: a data_dir there could be made, or swapped, by one of them.
PEOPLES_PLACES = ("/tmp", "/var/tmp", "/dev/shm", "/home", "/run/user", "/var/lock", "/run/lock")

# A registry as Enroot names it in `docker://[USER@][REGISTRY#]IMAGE[:TAG]`: a DNS name or an
# address, with an optional port; also a line of curl's netrc file and a file name for its CA.
RegistryHost = Annotated[
    str,
    StringConstraints(pattern=r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?(:[0-9]{1,5})?$"),
    Field(description="registry host name or address, optionally :port (lower case)"),
]
SecretName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")]
PEM_CERTIFICATE = r"^-----BEGIN CERTIFICATE-----\n[A-Za-z0-9+/=\n]+-----END CERTIFICATE-----\n?$"


class RegistryConfig(StrictModel):
    """A registry the nodes pull images from: its CA, when it is the site's own, and the
    account every person pulls with."""

    host: RegistryHost
    ca_cert: Annotated[str, StringConstraints(pattern=PEM_CERTIFICATE, max_length=16384)] | None = Field(
        None,
        description="PEM certificate of the CA that signed the registry's TLS certificate, added to every "
        "node's trusted CAs (none: a CA the nodes already trust)",
    )
    username: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9._@$-]{1,128}$")] | None = Field(
        None, description="the account Enroot pulls with (none: anonymous pulls)"
    )
    password_secret: SecretName | None = Field(
        None,
        description="name of the stack's secret config key holding the account's password or token "
        "(`pulumi config set --secret NAME`); it never appears in the stack file",
    )


class StackRegistryConfig(StrictModel):
    """A registry the stack runs, for a site without one: Debian's docker-registry in a container
    of its own on the NAT bridge (of the controller's host), TLS by a CA made for it on the host
    (its key never leaves the host; every node trusts the CA). People pull anonymously and
    read-only at `nat_address:port`; only the operator's account pushes, at `push_port`, so no
    person can replace an image another person runs."""

    name: Hostname = Field("registry", description="the registry container's hostname (container <cluster>-<name>)")
    nat_address: Address = Field(description="static address of the registry container on the NAT bridge")
    port: Port = Field(5000, description="where the nodes pull: anonymous, read-only, TLS")
    push_port: Port = Field(5001, description="where the operator pushes: TLS, the push account only")
    push_username: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9._-]{1,64}$")] = Field(
        "operator", description="the account that pushes"
    )
    push_password_secret: SecretName = Field(
        description="name of the stack's secret config key holding the push account's password "
        "(`pulumi config set --secret NAME`); it never appears in the stack file or the state in the clear"
    )
    keep_images: StrictBool = Field(
        True,
        description="destroy (or removing the registry) moves its images and CA to the kept directory "
        "(/var/cache/gpucluster/<cluster>/registry), where a new registry of the cluster takes them up; "
        "false: they are removed",
    )

    @field_validator("push_port")
    @classmethod
    def _two_ports(cls, value: int, info) -> int:
        if value == info.data.get("port"):
            raise ValueError(f"{value} is also `port`: pulls and pushes need a port each")
        return value


class ContainersConfig(StrictModel):
    """Jobs in container images: NVIDIA's Pyxis (a SPANK plugin: `srun --container-image`) and
    Enroot, built from their sources into the node image. A job's container runs as its person,
    in its job's cgroups (its GPUs, memory and CPUs), with the job's GPUs and the host driver's
    files, shared_dir at its path; each person's images and unpacked containers stay on the
    node, apart from everyone else's."""

    enabled: StrictBool = Field(True, description="build them; false: the section is kept, nothing is built")
    registries: list[RegistryConfig] = Field(
        [],
        max_length=16,
        description="registries with a CA or an account of the site's; people pull from any registry the "
        "nodes reach (docker://REGISTRY#IMAGE), these with the site's CA and account",
    )
    registry: StackRegistryConfig | None = Field(
        None, description="a registry the stack runs (none: people pull from the site's or public registries)"
    )
    data_dir: SafePath = Field(
        "/var/lib/gpucluster-enroot",
        description="node-local directory of each person's image cache (cache/user-<uid>) and unpacked "
        "containers (data/user-<uid>), made by root for that person only",
    )
    cache_limit_mb: StrictInt = Field(
        20480,
        ge=256,
        le=10**7,
        description="per person and node: when a job starts, the person's cached image layers beyond this "
        "are removed, the least recently used first",
    )

    @field_validator("data_dir")
    @classmethod
    def _root_only(cls, value: str) -> str:
        for place in PEOPLES_PLACES:
            if value == place or value.startswith(f"{place}/"):
                raise ValueError(f"{value!r} is under {place}, where people write: pick a directory only root writes")
        if value in ("/", "/var", "/var/lib", "/run", "/srv", "/opt", "/usr"):
            raise ValueError(f"{value!r} is a system directory: pick one of its own (the prolog changes its mode)")
        return value
