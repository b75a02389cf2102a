"""The cluster's shared filesystem: an NFS export (the site's, or served by the program from one
of its hosts) mounted at every host's shared_dir, which the nodes bind at the same path; with a
burst partition, burst nodes mount it there too (a one-host stack has one only then, served at
its NAT bridge address).

What is rendered here is a pure function of the config: the server's config, the mount of
each host (also written to the host state, so the boot unit mounts it again after a reboot).
"""

from pathlib import Path
from typing import Any, Protocol

import pulumi

from components.common.config_types import guard_tag
from components.common.transport import Transport, host_command
from components.host.gpu_host import ServedDirectory
from components.sharedfs.config import EfsShare, ServedNfs, SharedFsConfig, served_address, serving_host

FILES = Path(__file__).parent / "files"
CLIENT_PROGRAM = FILES / "nfs_stand_in_client.py"

# Packages each role needs: the server, and each kind of client; named as Debian 12 names them
# (the host's packages script renames those its distribution names otherwise: libnfs13).
SERVER_PACKAGES = ("nfs-ganesha", "nfs-ganesha-vfs")
CLIENT_PACKAGES = {"kernel": ("nfs-common",), "stand_in": ("python3-fusepy", "libnfs13")}
NOBODY = 65534


class SharedFsCluster(Protocol):
    """What the shared filesystem needs of the cluster (the composition's ClusterConfig): its
    name, the export, its hosts (each one's `name`, `address`, `connection`, `network`,
    `shared_dir`, `retired`) and the controller's host (the default server)."""

    name: str
    shared_fs: SharedFsConfig | None
    burst: Any
    """the burst config (its `subnets`, each a `cidr`), or None"""

    @property
    def multi_host(self) -> bool: ...
    @property
    def cluster_hosts(self) -> list[Any]: ...
    @property
    def controller_host(self) -> Any: ...
    def host_named(self, name: str) -> Any: ...
    def host_cluster_dir(self, host: Any) -> str: ...


def export_path(config: SharedFsCluster) -> str:
    """The export's path as clients mount it (a served one: its place in the server's pseudo
    root; EFS: its root)."""
    fs = config.shared_fs
    if isinstance(fs, EfsShare):
        return "/"
    return f"/gpucluster-{config.name}" if isinstance(fs, ServedNfs) else fs.path


def server_address(config: SharedFsCluster, efs_address: str | None = None) -> str:
    """Where hosts mount from; an EFS mount target's address is known only once it exists."""
    fs = config.shared_fs
    if isinstance(fs, EfsShare):
        return efs_address or "<efs mount target>"
    return str(served_address(config)) if isinstance(fs, ServedNfs) else fs.server


def server_dir(config: SharedFsCluster) -> str:
    """The served export's config, pid file, log and recovery directory on the serving host."""
    return f"{config.host_cluster_dir(serving_host(config))}/nfs-server"


def served_directory(config: SharedFsCluster, host: Any) -> ServedDirectory | None:
    """What the serving host's preflight checks of the served directory (None elsewhere)."""
    serving = serving_host(config)
    if not serving or serving.name != host.name:
        return None
    fs = config.shared_fs
    return ServedDirectory(directory=fs.directory, conf_dir=server_dir(config), adopt=fs.adopt_existing)


def export_clients(config: SharedFsCluster) -> list[str]:
    """Who may mount a served export: the cluster's hosts (a one-host stack's host mounts its
    own export from the served address), and the burst subnets (a burst node mounts it itself,
    as root, over the VPN), no one else. Not the hosts' container subnets: nodes see the share
    through their host's bind mount and never speak NFS, and a job that did would claim any
    uid (AUTH_SYS)."""
    own = None if config.multi_host else served_address(config)
    clients = [str(own)] if own else []
    for host in config.cluster_hosts:
        address = host.address or getattr(host.connection, "address", None)
        if address:
            clients.append(str(address))
    if config.burst is not None:
        clients += [str(subnet.cidr) for subnet in config.burst.subnets]
    return list(dict.fromkeys(clients))


def burst_mount(config: SharedFsCluster) -> str:
    """SERVER:PORT:EXPORT a burst node mounts at shared_dir: the served export or the site's;
    empty without one, or with EFS (in the EC2 site's VPC, not the burst VPC)."""
    fs = config.shared_fs
    if fs is None or isinstance(fs, EfsShare):
        return ""
    return f"{server_address(config)}:{fs.port}:{export_path(config)}"


def render_ganesha_conf(config: SharedFsCluster) -> str:
    """NFS-Ganesha serving only this export, over NFSv4 and TCP, to the cluster's hosts only,
    from privileged ports only."""
    fs = config.shared_fs
    squash = "root_squash" if fs.root_squash else "no_root_squash"
    return (
        f"# gpu-cluster {config.name}: the shared filesystem (rendered; components/sharedfs)\n"
        "NFS_CORE_PARAM {\n"
        "  Protocols = 4;\n"
        f"  NFS_Port = {fs.port};\n"
        f"  Bind_addr = {served_address(config)};\n"
        "  Enable_NLM = false;\n"
        "  Enable_RQUOTA = false;\n"
        "}\n"
        "NFS_KRB5 { Active_krb5 = false; }\n"
        # No grace period after a start: the cluster's own server, whose clients reconnect.
        f"NFSV4 {{ Graceless = true; RecoveryRoot = {server_dir(config)}/recovery; }}\n"
        "EXPORT {\n"
        "  Export_Id = 1;\n"
        f"  Path = {fs.directory};\n"
        f"  Pseudo = {export_path(config)};\n"
        "  Access_Type = None;\n"
        f"  Squash = {squash};\n"
        f"  Anonymous_Uid = {NOBODY};\n"
        f"  Anonymous_Gid = {NOBODY};\n"
        "  Protocols = 4;\n"
        "  Transports = TCP;\n"
        "  SecType = sys;\n"
        # AUTH_SYS uids are trusted from reserved source ports only (root's: the kernel client,
        # the stand-in client as root); a job's process, masqueraded or not, has none.
        "  PrivilegedPort = true;\n"
        f"  CLIENT {{ Clients = {', '.join(export_clients(config))}; Access_Type = RW; }}\n"
        "  FSAL { Name = VFS; }\n"
        "}\n"
    )


def host_packages(config: SharedFsCluster, host: Any) -> list[str]:
    """What a host needs for the shared filesystem: its client, and the server where it serves."""
    fs = config.shared_fs
    if fs is None:
        return []
    serving = serving_host(config)
    return [*CLIENT_PACKAGES[fs.client], *(SERVER_PACKAGES if serving and serving.name == host.name else ())]


def nfs_guard(config: SharedFsCluster, host: Any, server: str) -> str:
    """The host's NFS guard (components/files/lib/guards.sh): its containers' subnets (NAT and
    cluster) get no NFS to the server, whoever runs it (the site, EFS, the serving host): a job
    would claim any uid (AUTH_SYS), and its traffic leaves masqueraded as the host's. The
    serving host also guards its own INPUT."""
    net = host.network
    serving = serving_host(config)
    word = f"{guard_tag(config.name, 'nfs')},nfs,{server},{config.shared_fs.port}"
    word += f",{net.nat_bridge.subnet}+{net.cluster_bridge.subnet}"
    return word + (",input" if serving and serving.name == host.name else "")


def mount_state(config: SharedFsCluster, host: Any, efs_address: str | None = None) -> dict[str, str]:
    """The host-state lines of the shared filesystem (none without one): what boot.sh brings back."""
    fs = config.shared_fs
    if fs is None:
        return {}
    state = {}
    serving = serving_host(config)
    if serving and serving.name == host.name:
        state["NFS_SERVER"] = f"{server_dir(config)},{served_address(config)},{fs.port}"
    state["NFS_GUARD"] = nfs_guard(config, host, server_address(config, efs_address))
    state["SHARED_MOUNT"] = (
        f"{fs.client},{server_address(config, efs_address)},{fs.port},{export_path(config)},{host.shared_dir},"
        f"{config.host_cluster_dir(host)}"
    )
    return state


def nfs_server(
    name: str, config: SharedFsCluster, transport: Transport, after: list[pulumi.Resource], opts: pulumi.ResourceOptions
):
    """`<name>-nfs-server` on the serving host; destroy stops it and keeps the files. `opts`:
    its parent (and aliases); it waits for `after`."""
    fs = config.shared_fs
    return host_command(
        f"{name}-nfs-server",
        transport=transport,
        create=FILES / "nfs_server_create.sh",
        delete=FILES / "nfs_server_delete.sh",
        environment={
            "CLUSTER": config.name,
            "CONF_DIR": server_dir(config),
            "CONFIG_TEXT": render_ganesha_conf(config),
            "DIRECTORY": fs.directory,
            "ADDRESS": str(served_address(config)),
            "PORT": str(fs.port),
        },
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=after)),
    )


def shared_mount(
    name: str,
    config: SharedFsCluster,
    host: Any,
    transport: Transport,
    after: list[pulumi.Resource],
    opts: pulumi.ResourceOptions,
    efs_address: pulumi.Input[str] | None = None,
):
    """`<name>-shared-mount`: the export at the host's shared_dir, and the host's NFS guard;
    delete unmounts it there and removes the guard. `opts`: its parent (and aliases); it waits
    for `after`."""
    fs = config.shared_fs
    environment = {
        "CLIENT": fs.client,
        "SERVER": efs_address if efs_address is not None else server_address(config),
        "PORT": str(fs.port),
        "EXPORT": export_path(config),
        "SHARED_DIR": host.shared_dir,
        "STATE_DIR": config.host_cluster_dir(host),
    }
    environment["NFS_GUARD"] = pulumi.Output.from_input(environment["SERVER"]).apply(
        lambda server: nfs_guard(config, host, server)
    )
    if fs.client == "stand_in":
        environment["CLIENT_TEXT"] = CLIENT_PROGRAM.read_text()
    return host_command(
        f"{name}-shared-mount",
        transport=transport,
        create=FILES / "shared_mount_create.sh",
        delete=FILES / "shared_mount_delete.sh",
        environment=environment,
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=after)),
    )
