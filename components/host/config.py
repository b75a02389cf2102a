"""Typed config of a host: its directories, the people made on it, and how it is reached."""

from typing import Annotated, Literal

from pydantic import Field

from components.config_types import Port, SafePath, StrictBool, StrictModel, UserName


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


# Ids of people, never of system accounts (below 1000) or nobody (65534).
PersonId = Annotated[int, Field(ge=1000, le=60000)]


class UserConfig(StrictModel):
    """A person: the same name, uid and gid on the host and in every container of the cluster."""

    name: UserName = Field(description="login name")
    uid: PersonId = Field(description="user id, 1000-60000")
    gid: PersonId = Field(description="primary group id, 1000-60000")
    group: UserName | None = Field(None, description="primary group name (default: the user's name)")

    @property
    def group_name(self) -> str:
        return self.group or self.name

    @property
    def spec(self) -> str:
        """NAME:UID:GID:GROUP, as the scripts take a person (components/files/lib.sh)."""
        return f"{self.name}:{self.uid}:{self.gid}:{self.group_name}"


# An SSH public key as OpenSSH prints it (`ssh-keyscan`, /etc/ssh/ssh_host_*_key.pub), comment dropped.
HOST_KEY_PATTERN = r"^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)) [A-Za-z0-9+/]+={0,3}$"


class LocalConnection(StrictModel):
    """Commands run on the machine that runs `pulumi up`."""

    kind: Literal["local"] = "local"


class SshEndpoint(StrictModel):
    """An SSH server, its host key pinned: a host presenting another key is refused."""

    address: str = Field(
        pattern=r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,252})$", description="IPv4 address or DNS name of the SSH server"
    )
    port: Port = Field(22, description="SSH port")
    user: str = Field("root", pattern=r"^[a-z_][a-z0-9_-]{0,31}$", description="login user (root: scripts need it)")
    host_key: str = Field(
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
    dial_error_limit: int = Field(10, ge=-1, le=1000, description="failed dials before giving up (-1: forever)")
