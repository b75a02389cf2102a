"""GpuHost: checks the host before anything changes, then installs what the cluster needs."""

import json
from dataclasses import dataclass
from pathlib import Path

import pulumi

from components.common import script_store
from components.common.config_types import KEEP_DIR, ClusterIdentity
from components.common.options import child_options
from components.common.transport import Transport, env_list, host_command
from components.host.config import HostConfig, UserConfig
from components.network.config import NetworkConfig

FILES = Path(__file__).parent / "files"

# What one container may hold of the per-user kernel limits on its host (lib/kernel_limits.sh):
# a booted node holds 2-3 inotify instances and under 10 watches (systemd, journald); a boot
# takes more for a while (systemd's path units, tmpfiles, logind). With room to spare: 64 nodes
# add 1024 instances, the figure LXD's production setup gives.
KERNEL_LIMITS_PER_CONTAINER = {"fs.inotify.max_user_instances": 16, "fs.inotify.max_user_watches": 1024}

# Packages the host needs: LXC and its Debian template, which debootstraps the node image and
# verifies Debian's archive with debian-archive-keyring (Debian has it already; Ubuntu ships
# only its own keyring), and the tools the scripts call. No Slurm and no munge: they run in
# the node image. Named as Debian 12 names them: packages_create.sh installs each by its name
# on the host's distribution (lib/host_distribution.sh), which the preflight checks.
HOST_PACKAGES = [
    "lxc",
    "lxc-templates",
    "debootstrap",
    "debian-archive-keyring",
    "rsync",
    "iptables",
    "iproute2",
    "curl",
    "procps",
]


@dataclass(frozen=True)
class ServedDirectory:
    """The directory this host serves as the shared filesystem (components/sharedfs), which the
    preflight checks: `conf_dir` holds the cluster's server config when it serves it already;
    `adopt` allows serving files that were there before (shared_fs.adopt_existing)."""

    directory: str
    conf_dir: str
    adopt: bool


def _release_environment(image_debian: str, accounting_data: str, accounting: bool) -> dict[str, str]:
    """The node image's Debian release (its Slurm): a change from the running one is checked
    against the queue and the accounting database (`accounting_data` on its host; on every host
    of a cluster with `accounting`, the running controller's use of it, so every host's
    preflight refuses alike). Nothing without an image release to check."""
    if not image_debian:
        return {}
    return {
        "IMAGE_DEBIAN": image_debian,
        **({"ACCOUNTING_DATA": accounting_data} if accounting_data else {}),
        **({"ACCOUNTING": "yes"} if accounting else {}),
    }


class GpuHost(pulumi.ComponentResource):
    """The GPU host: a read-only preflight, then the packages.

    `containers` are the LXC names the cluster will create (the preflight refuses foreign
    ones), `host_ports` the ports it will forward; `extra_packages` what else the host needs
    (the shared filesystem's server or client); `stand_in_gpus` stand-in GPUs are made in
    `device_dir` (gpu.stand_in), where `gpu_devices` lists them.

    Builds:
      - `<name>-stand-in-gpus` (only with gpu.stand_in): character devices with NVIDIA's
        major in the cluster's private device directory, for a machine without a GPU; refused
        where an NVIDIA driver is loaded; destroy removes them.
      - `<name>-preflight`: fails, before any change, on a distribution other than Debian 12,
        Debian 13, Ubuntu 22.04 and 24.04 (lib/host_distribution.sh), missing GPU device nodes,
        a bridge name or subnet already used by something else (Debian's lxc-net takes 10.0.3.1/24),
        a host port already listening, a container name taken by a foreign container, fewer
        online CPUs than a node declares, a state directory (or munge key) someone other than
        root could have written, real GPUs without the driver's libcuda.so.1 (found as the
        containers will find it: lib/gpu_driver.sh), cgroup controllers LXC cannot delegate to
        the nodes (lib/cgroups.sh), a directory to serve (`served`) that holds files the cluster
        did not make, unless adopted (lib/shared_fs.sh); its stdout (JSON) reports what it found.
      - `<name>-kernel-limits`: raises the per-user kernel limits (inotify instances and
        watches) by what the host's containers need, never below the host's own values, and
        persists them in /etc/sysctl.d/90-gpucluster-<cluster>[-<host>].conf; destroy removes the
        file and gives the values back (lib/kernel_limits.sh).
      - `<name>-packages`: installs missing packages, by their names on the host's
        distribution. Destroy leaves them installed (removing one can take reverse
        dependencies and other users' packages along) and keeps their list in
        KEEP_DIR/<cluster>/packages-left-installed.
      - `<name>-shared-dir`: the directory shared with every node; destroy removes it only
        when empty, so no job's files are lost.
      - `<name>-users` (with `users`): the cluster's people on the host, with the names, uids
        and gids they have in the containers. Clusters sharing a person each register for
        them; one the program made goes when the last cluster using it does.
    """

    devices: pulumi.Output[list]
    driver_version: pulumi.Output[str]
    cgroup_version: pulumi.Output[str]
    uvm_major: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        cluster: ClusterIdentity,
        host: HostConfig,
        network: NetworkConfig,
        gpu_devices: list[str],
        control_devices: list[str],
        node_cpus: int,
        host_ports: list[int],
        containers: list[str],
        stand_in_gpus: int = 0,
        node_memory_mb: pulumi.Input[int] = 0,
        device_dir: str | None = None,
        driver_files: list[str] | tuple[str, ...] = (),
        users: tuple[UserConfig, ...] = (),
        extra_packages: list[str] | tuple[str, ...] = (),
        served: ServedDirectory | None = None,
        image_debian: str = "",
        accounting_data: str = "",
        accounting: bool = False,
        opts: pulumi.ResourceOptions | None = None,
        transport: Transport | None = None,
    ):
        super().__init__("gpu-cluster:host:GpuHost", name, None, opts)
        self._prefix, self._cluster, self._opts, self._transport = name, cluster, opts, transport
        environment = _checked_environment(cluster, network, gpu_devices, host_ports, containers)
        environment |= _release_environment(image_debian, accounting_data, accounting)
        if users:
            # Only with people to check: a cluster without any keeps its preflight inputs.
            environment["USERS"] = env_list(user.spec for user in users)
        # Stand-ins first: the preflight checks them like real GPUs.
        self.stand_in_gpus = self._stand_in_gpus(stand_in_gpus, device_dir) if stand_in_gpus else None
        # Re-run the checks whenever what they check changes. A long value (the people of a
        # large site, the containers of many nodes) by its digest: the state keeps a few KB.
        triggers = [json.dumps({key: _short(value) for key, value in environment.items()}, sort_keys=True)]
        # These inputs are not in the trigger, so an upgrade that adds their checks does not
        # replace the preflight; a change of them is an update, which runs the checks again too.
        environment |= {
            "CONTROL_DEVICES": env_list(control_devices),
            "CLUSTER_DIR": cluster.cluster_dir,
            "NODE_CPUS": str(node_cpus),
            # What this host's node containers may hold in all (their memory limits).
            "NODE_MEMORY_MB": pulumi.Output.from_input(node_memory_mb).apply(str),
            # The driver check (real GPUs need libcuda.so.1): gpu.driver_files, else found on the host.
            "DRIVER_FILES": env_list(driver_files),
            "GPU_STAND_IN": "1" if stand_in_gpus else "",
            **self._kernel_limits_environment(len(containers)),
        }
        if served:
            # Only on a serving host, so the others keep their preflight inputs.
            environment |= {
                "SERVED_DIRECTORY": served.directory,
                "SERVED_CONF_DIR": served.conf_dir,
                "SERVED_ADOPT": "1" if served.adopt else "",
            }
        self.preflight = host_command(
            f"{name}-preflight",
            transport=transport,
            create=FILES / "preflight.sh",
            environment=environment,
            triggers=triggers,
            check=True,
            opts=child_options(self, opts, *([self.stand_in_gpus] if self.stand_in_gpus else [])),
        )
        self.kernel_limits = host_command(
            f"{name}-kernel-limits",
            transport=transport,
            create=FILES / "kernel_limits_create.sh",
            delete=FILES / "kernel_limits_delete.sh",
            environment={"CLUSTER": cluster.name, **self._kernel_limits_environment(len(containers))},
            opts=child_options(self, opts, self.preflight),
        )
        self._install(host, extra_packages, users)
        self._facts()

    def _kernel_limits_environment(self, containers: int) -> dict[str, str]:
        """The cluster's file in /etc/sysctl.d/ (one per host of it) and its shares: what its
        `containers` on this host need of each limit."""
        host = f"-{self._cluster.host}" if self._cluster.host else ""
        shares = (f"{key} {each * containers}" for key, each in KERNEL_LIMITS_PER_CONTAINER.items())
        return {
            "KERNEL_LIMITS_FILE": f"/etc/sysctl.d/90-gpucluster-{self._cluster.name}{host}.conf",
            "KERNEL_LIMITS": env_list(shares),
        }

    def _stand_in_gpus(self, count: int, device_dir: str | None):
        """Character devices with NVIDIA's major in the cluster's private device directory."""
        return host_command(
            f"{self._prefix}-stand-in-gpus",
            transport=self._transport,
            create=FILES / "stand_in_gpus_create.sh",
            delete=FILES / "stand_in_gpus_delete.sh",
            check=True,
            environment={
                "CLUSTER": self._cluster.name,
                "DEVICE_DIR": device_dir,
                "GPU_COUNT": str(count),
            },
            opts=child_options(self, self._opts),
        )

    def _install(self, host: HostConfig, extra_packages, users: tuple[UserConfig, ...]) -> None:
        """After the preflight: the packages, then the shared directory and the people."""
        name, cluster, opts, transport = self._prefix, self._cluster, self._opts, self._transport
        self.packages = host_command(
            f"{name}-packages",
            transport=transport,
            create=FILES / "packages_create.sh",
            delete=FILES / "packages_delete.sh",
            environment={
                "CLUSTER": cluster.name,
                "PACKAGES": env_list([*HOST_PACKAGES, *extra_packages] if host.install_packages else []),
                "RECORD": f"{cluster.cluster_dir}/host-packages",
                "KEEP_DIR": KEEP_DIR,
            },
            opts=child_options(self, opts, self.preflight),
        )
        self.shared_dir = host_command(
            f"{name}-shared-dir",
            transport=transport,
            create=FILES / "shared_dir_create.sh",
            delete=FILES / "shared_dir_delete.sh",
            environment={
                "SHARED_DIR": host.shared_dir,
                "RECORD": f"{cluster.cluster_dir}/shared-dirs-created",
            },
            opts=child_options(self, opts, self.packages),
        )
        self.users = None
        if users:
            self.users = host_command(
                f"{name}-users",
                transport=transport,
                create=FILES / "users_create.sh",
                delete=FILES / "users_delete.sh",
                environment={"CLUSTER": cluster.name, "USERS": env_list(user.spec for user in users)},
                opts=child_options(self, opts, self.packages),
            )

    def _facts(self) -> None:
        """What the preflight found (its JSON stdout), as the component's outputs."""
        facts = self.preflight.stdout.apply(_parse_facts)
        self.devices = facts.apply(lambda f: f.get("devices", []))
        self.driver_version = facts.apply(lambda f: f.get("driver_version", "none"))
        self.cgroup_version = facts.apply(lambda f: f.get("cgroup_version", "unknown"))
        self.uvm_major = facts.apply(lambda f: f.get("uvm_major", "none"))
        self.register_outputs(
            {
                "devices": self.devices,
                "driver_version": self.driver_version,
                "cgroup_version": self.cgroup_version,
                "uvm_major": self.uvm_major,
            }
        )


def _checked_environment(
    cluster: ClusterIdentity,
    net: NetworkConfig,
    gpu_devices: list[str],
    host_ports: list[int],
    containers: list[str],
) -> dict[str, str]:
    """The preflight's inputs whose change re-runs it (its trigger)."""
    return {
        "CLUSTER": cluster.name,
        "CLUSTER_DIR": cluster.cluster_dir,
        "IMAGE": cluster.container_name("image"),
        "GPU_DEVICES": env_list(gpu_devices),
        "NAT_BRIDGE": net.nat_bridge.name,
        "NAT_ADDRESS": str(net.nat_bridge.address),
        "CLUSTER_BRIDGE": net.cluster_bridge.name,
        "CLUSTER_SUBNET": str(net.cluster_bridge.subnet),
        "HOST_PORTS": env_list(host_ports),
        "CONTAINERS": env_list(containers),
    }


def _short(value: str) -> str:
    """A trigger's value as it is, or when it is long (a stored parameter's size) its SHA-256."""
    if not isinstance(value, str) or len(value.encode()) <= script_store.STORED_ENV_BYTES:
        return value
    return f"sha256:{script_store.digest(value)}"


def _parse_facts(stdout: str | None) -> dict:
    """The preflight's last stdout line is a JSON object of what it found."""
    lines = (stdout or "").strip().splitlines()
    try:
        return json.loads(lines[-1]) if lines else {}
    except json.JSONDecodeError:
        return {}
