"""Typed config of the cluster's shared filesystem: one NFS export that every host mounts at
its `shared_dir`, so a job script written there once runs on the nodes of every host. A
one-host stack has one only with a burst partition: its burst nodes mount it (the host too)."""

from typing import Annotated, ClassVar, Literal

from pydantic import AfterValidator, Field

from components.common.config_types import Hostname, Port, SafePath, StrictBool, StrictModel, check_host_address
from components.host.rules import LXC_DIR_FORBIDDEN_TREES, _system_dir_problem

NfsClient = Literal["kernel", "stand_in"]

CLIENT_DESCRIPTION = (
    "how hosts mount the export: kernel (default; `mount -t nfs4`, Debian's nfs-common) or stand_in "
    "(a user-space NFSv4 client over FUSE shipped with the program, for hosts whose kernel has no NFS "
    "client, as gpu.stand_in stands in for GPUs)"
)


class ExistingNfs(StrictModel):
    """An NFS export the site already runs: the program only mounts it."""

    kind: Literal["nfs"]
    server: Annotated[str, AfterValidator(check_host_address)] = Field(
        pattern=r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,252})$", description="IPv4 address or DNS name of the NFS server"
    )
    path: SafePath = Field(description="the export's path on the server (NFSv4: its path in the server's pseudo root)")
    port: Port = Field(2049, description="the server's NFS port")
    client: NfsClient = Field("kernel", description=CLIENT_DESCRIPTION)


class ServedNfs(StrictModel):
    """An export the program serves from one of the cluster's hosts (NFS-Ganesha, a user-space
    NFSv4 server: no kernel nfsd needed and no edit of the host's /etc/exports)."""

    kind: Literal["served"]
    host: Hostname | None = Field(
        None, description="the host (hosts[].name) that serves it; default: the host slurmctld runs on"
    )
    directory: SafePath = Field(
        description="where the files live on the serving host; destroy stops serving it and keeps every file"
    )
    port: Port = Field(
        2049,
        description="the NFS port the server listens on, at the serving host's `address` (a one-host stack: "
        "its NAT bridge's address)",
    )
    root_squash: StrictBool = Field(
        True,
        description="map root of every client to nobody (default): root on one host cannot then own or "
        "change other users' files on every host; false only where every host's root is trusted",
    )
    client: NfsClient = Field("kernel", description=CLIENT_DESCRIPTION)
    adopt_existing: StrictBool = Field(
        False,
        description="serve `directory` although it already holds files the cluster did not make (they "
        "become readable and writable from every host and node); default false: the serving host's "
        "preflight refuses such a directory before anything changes",
    )


class EfsShare(StrictModel):
    """An Amazon EFS file system in the EC2 site's VPC (every host on EC2): a mount target in
    the site's subnet, NFS (TCP 2049) admitted from the cluster's instances only."""

    kind: Literal["efs"]
    encrypted: StrictBool = Field(True, description="encrypted at rest (AWS's EFS key)")
    performance_mode: Literal["generalPurpose", "maxIO"] = Field("generalPurpose", description="EFS performance mode")

    # What every host mounts it with: EC2's kernels have an NFS client; EFS listens on 2049.
    client: ClassVar[str] = "kernel"
    port: ClassVar[int] = 2049


SharedFsConfig = Annotated[ExistingNfs | ServedNfs | EfsShare, Field(discriminator="kind")]


def serving_host(c):
    """The host serving a ServedNfs export (default: slurmctld's); None for an existing export."""
    fs = c.shared_fs
    if not isinstance(fs, ServedNfs):
        return None
    return c.host_named(fs.host) if fs.host and c.multi_host else c.controller_host


def served_address(c):
    """Where a ServedNfs export is served (its server binds it; every host and burst node
    mounts from it): the serving host's `address`, or, in a one-host stack (which has one only
    beside a burst partition), the host's NAT bridge address, which the burst rules require in
    burst.on_premises_cidrs; None for an existing export, or a serving host without `address`."""
    if not isinstance(c.shared_fs, ServedNfs):
        return None
    if not c.multi_host:
        return c.cluster_hosts[0].network.nat_bridge.address.ip
    return serving_host(c).address


def rule_shared_fs(c):
    """shared_fs: several hosts (or one with a burst partition), one mount path, a serving
    host that the others can reach."""
    fs = c.shared_fs
    if fs is None:
        return
    if not c.multi_host:
        yield from _one_host_shared_fs(c)
        return
    first = c.hosts[0].shared_dir
    for i, host in enumerate(c.hosts[1:], start=1):
        if host.shared_dir != first:
            yield (
                f"hosts[{i}].shared_dir: {host.shared_dir} differs from hosts[0].shared_dir {first}; "
                "with shared_fs every host mounts the export at the same path"
            )
    if isinstance(fs, EfsShare):
        for i, host in enumerate(c.hosts):
            if not host.is_ec2:
                yield f"shared_fs: kind efs needs every host on EC2; hosts[{i}] {host.name!r} is not (kind: ec2)"
        return
    if not isinstance(fs, ServedNfs):
        return
    names = [host.name for host in c.hosts]
    if fs.host is not None and fs.host not in names:
        yield f"shared_fs.host: {fs.host!r} is not one of hosts[].name ({', '.join(names)})"
        return
    server = serving_host(c)
    where = "shared_fs.host" if fs.host else f"shared_fs (served by the controller's host {server.name!r})"
    if served_address(c) is None:
        yield f"{where}: host {server.name!r} has no `address`, which the other hosts mount the export from"
    if server.retired:
        yield f"{where}: host {server.name!r} is retired; serve the export from a live host"
    yield from _served_directory_problems(fs, server)


def _one_host_shared_fs(c):
    """A one-host stack's shared_dir is on its only host: a shared filesystem only serves its
    burst nodes (rule_burst_shared_fs: the server inside burst.on_premises_cidrs, no EFS)."""
    fs = c.shared_fs
    if c.burst is None:
        yield (
            "shared_fs: needs `hosts` or `burst` (a one-host stack's shared_dir is on its only host already; "
            "with a burst partition it is served to the burst nodes)"
        )
        return
    if not isinstance(fs, ServedNfs):
        return
    if fs.host is not None:
        yield f"shared_fs.host: {fs.host!r} names a host, but this stack has no `hosts` list (it serves from its host)"
        return
    yield from _served_directory_problems(fs, c.cluster_hosts[0])


def _served_directory_problems(fs, server):
    """The served directory: no system directory, apart from the serving host's own directories."""
    problem = served_directory_problem(fs.directory)
    if problem:
        yield problem
    for label, path in (
        ("shared_dir", server.shared_dir),
        ("state_dir", server.state_dir),
        ("lxc_dir", server.lxc_dir),
    ):
        if _nested(fs.directory, path):
            yield (
                f"shared_fs.directory: {fs.directory} and the {label} {path} of host {server.name!r} lie one "
                "inside the other; keep the served files in a directory of their own"
            )


# Beside the state directory's forbidden trees and the user-writable ones: root's home. The
# served directory is exported read-write to every host and bound into every node.
SERVED_DIRECTORY_FORBIDDEN_EXTRA = ("/root",)


def served_directory_problem(directory: str) -> str | None:
    """shared_fs.directory: never a system directory or one inside a system, user-writable
    or root's tree (/etc, /root, /home, /var/lib...): its files become every node's."""
    return _system_dir_problem(
        "shared_fs.directory", directory, (*LXC_DIR_FORBIDDEN_TREES, *SERVED_DIRECTORY_FORBIDDEN_EXTRA)
    )


def _nested(a: str, b: str) -> bool:
    a, b = a.rstrip("/") + "/", b.rstrip("/") + "/"
    return a.startswith(b) or b.startswith(a)
