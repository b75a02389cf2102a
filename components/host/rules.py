"""The cluster's rules on hosts, their directories and the people using them (registered in
components/composition/config.py).

Each rule takes the composed cluster and yields messages naming the field and what it accepts.
"""

import re
from collections.abc import Iterable, Iterator

from components.common.config_types import duplicates, is_within, related
from components.host.config import is_system_account, same_machine_key
from components.network.rules import host_subnets

# Host directories the cluster never mounts into a container, keeps state in, or shares:
# these exact paths...
SYSTEM_DIRS = frozenset(
    {
        "/",
        "/bin",
        "/boot",
        "/dev",
        "/etc",
        "/home",
        "/lib",
        "/lib32",
        "/lib64",
        "/libx32",
        "/media",
        "/mnt",
        "/opt",
        "/proc",
        "/root",
        "/run",
        "/sbin",
        "/srv",
        "/sys",
        "/tmp",
        "/usr",
        "/usr/bin",
        "/usr/include",
        "/usr/lib",
        "/usr/lib32",
        "/usr/lib64",
        "/usr/libexec",
        "/usr/local",
        "/usr/local/bin",
        "/usr/local/lib",
        "/usr/local/sbin",
        "/usr/sbin",
        "/usr/share",
        "/usr/src",
        "/var",
        "/var/cache",
        "/var/lib",
        "/var/log",
        "/var/run",
        "/var/spool",
        "/var/tmp",
    }
)
# ...and nothing inside these trees: the kernel's, the host's configuration, LXC's containers.
KERNEL_AND_CONFIG_TREES = ("/proc", "/sys", "/dev", "/boot", "/etc", "/run", "/var/lib/lxc", "/var/cache/lxc")
# The cluster's state (the munge key) lives only in root-owned, non-world-writable trees.
STATE_FORBIDDEN_TREES = (*KERNEL_AND_CONFIG_TREES, "/tmp", "/var/tmp", "/usr", "/bin", "/sbin", "/lib", "/lib64")
# Where anyone may write, or a user owns the place: never the cluster's runtime directory (a
# socket planted there would answer for munge) nor its containers' (a planted container config
# would run its hooks as root).
USER_WRITABLE_TREES = (
    "/tmp",
    "/var/tmp",
    "/dev/shm",
    "/run/lock",
    "/run/shm",
    "/run/user",
    "/var/lock",
    "/var/crash",
    "/home",
)
# The runtime and container directories: the system's own (the defaults) or one of the cluster's
# that passes the state directory's checks; a runtime directory may also be below /run.
RUN_DIR_FORBIDDEN_TREES = (*(t for t in STATE_FORBIDDEN_TREES if t != "/run"), *USER_WRITABLE_TREES)
LXC_DIR_FORBIDDEN_TREES = (*STATE_FORBIDDEN_TREES, *USER_WRITABLE_TREES)
# Driver files are bound read-only into containers: never secrets or per-host state.
DRIVER_FILE_FORBIDDEN_TREES = (*KERNEL_AND_CONFIG_TREES, "/root", "/home", "/var/lib", "/var/log", "/tmp")


def _system_dir_problem(field: str, path: str, trees: Iterable[str]) -> str | None:
    if path in SYSTEM_DIRS:
        return f"{field}: {path} is a system directory; use a directory of its own (e.g. /srv/gpucluster/...)"
    for tree in trees:
        if is_within(path, tree):
            return f"{field}: {path} is inside {tree}, which the cluster must not use; pick another directory"
    return None


def rule_host_paths(c) -> Iterator[str]:
    for i, host in enumerate(c.cluster_hosts):
        at, gpu_at = c.host_prefixes(i)
        state, shared = host.state_dir, host.shared_dir
        problem = _system_dir_problem(f"{at}state_dir", state, STATE_FORBIDDEN_TREES)
        if problem:
            yield problem
        problem = _system_dir_problem(f"{at}shared_dir", shared, KERNEL_AND_CONFIG_TREES)
        if problem:
            yield problem
        elif related(shared, state):
            yield f"{at}shared_dir: {shared} overlaps {at}state_dir {state} (the munge key lives there)"
        yield from _runtime_dir_problems(at, host)
        cuda = host.gpu.cuda_path
        if cuda:
            problem = _system_dir_problem(f"{gpu_at}cuda_path", cuda, KERNEL_AND_CONFIG_TREES)
            if problem:
                yield problem
            elif related(cuda, state):
                yield f"{gpu_at}cuda_path: {cuda} overlaps {at}state_dir {state} (the munge key lives there)"


def _runtime_dir_problems(at: str, host) -> Iterator[str]:
    """run_dir and lxc_dir: the system's own, or a directory only root can write to, apart
    from the shared directory."""
    for field, trees in (("run_dir", RUN_DIR_FORBIDDEN_TREES), ("lxc_dir", LXC_DIR_FORBIDDEN_TREES)):
        path, default = getattr(host, field), type(host).model_fields[field].default
        problem = None if path == default else _system_dir_problem(f"{at}{field}", path, trees)
        if problem:
            yield problem
        elif related(path, host.shared_dir):
            yield f"{at}{field}: {path} overlaps {at}shared_dir {host.shared_dir}, which the nodes' users can write"


def rule_driver_files(c) -> Iterator[str]:
    for h, host in enumerate(c.cluster_hosts):
        _, gpu_at = c.host_prefixes(h)
        for i, pattern in enumerate(host.gpu.driver_files):
            directory, _, name = pattern.rpartition("/")
            field = f"{gpu_at}driver_files[{i}]"
            trees = [tree for tree in (*DRIVER_FILE_FORBIDDEN_TREES, host.state_dir) if is_within(directory, tree)]
            if re.search(r"[*?\[\]]", directory):
                yield f"{field}: {pattern} may only use glob characters in its last part (the file name)"
            elif not directory or not name.strip("*?[]"):
                yield f"{field}: {pattern} must name files in a directory below / (e.g. /usr/lib/.../libcuda.so*)"
            elif trees:
                yield f"{field}: {pattern} is inside {trees[0]}, whose files never go into a container"


def rule_users(c) -> Iterator[str]:
    for i, user in enumerate(c.users):
        for field, name in (("name", user.name), ("group", user.group)):
            if name is not None and is_system_account(name):
                yield (
                    f"users[{i}].{field}: {name!r} is a system account or group (Debian's base accounts, the "
                    "daemons the cluster installs, systemd-*, _*), never a person's; pick another name"
                )
    for name in duplicates([u.name for u in c.users]):
        yield f"users[].name: {name!r} is listed more than once"
    for uid in duplicates([u.uid for u in c.users]):
        yield f"users[].uid: {uid} is given to more than one user"
    groups: dict[int, set[str]] = {}
    for user in c.users:
        groups.setdefault(user.gid, set()).add(user.group_name)
    for gid, names in groups.items():
        if len(names) > 1:
            yield f"users[].gid: {gid} is the group of {sorted(names)}; one gid, one group name"
    for name in duplicates([name for names in groups.values() for name in names]):
        yield f"users[].group: {name!r} is given more than one gid"


def rule_hosts(c) -> Iterator[str]:
    """Hosts are told apart by name, subnets and the address the others route through."""
    hosts = c.cluster_hosts
    node_names = set(c.node_names) | ({c.web_app.name} if c.web_app else set()) | ({c.login.name} if c.login else set())
    for i, host in enumerate(hosts):
        if host.name in node_names:
            yield f"hosts[{i}].name: {host.name!r} is also a node or web_app name; names must be unique"
        if len(hosts) > 1 and host.address is None:
            yield f"hosts[{i}].address: required with several hosts (the other hosts route its subnets through it)"
        controller = c.slurm.controller
        controller_here = controller.placement == "host" and host.name == (controller.host or hosts[0].name)
        if c.client_node(host) is None and not controller_here:
            yield (
                f"hosts[{i}]: {host.name!r} holds no node; a host runs the cluster's Slurm commands in one of its "
                "nodes (the node image's Slurm, none of the host's): give it a node or leave it out"
            )
    for (i, a), (j, b) in ((x, y) for x in enumerate(hosts) for y in enumerate(hosts) if x[0] < y[0]):
        for field_a, net_a in host_subnets(a):
            for field_b, net_b in host_subnets(b):
                if net_a.overlaps(net_b):
                    yield (
                        f"hosts[{j}].{field_b}: {net_b} overlaps hosts[{i}].{field_a} {net_a}; "
                        "the container subnets of different hosts must be disjoint (they are routed between hosts)"
                    )
    for address in duplicates([h.address for h in hosts if h.address]):
        yield f"hosts[].address: {address} is given to more than one host"
    yield from _route_addresses(hosts)
    for (i, a), (j, b) in ((x, y) for x in enumerate(hosts) for y in enumerate(hosts) if x[0] < y[0]):
        same_machine = not a.is_ssh and not b.is_ssh
        if same_machine:
            yield f"hosts[{j}].connection: hosts[{i}] is already the local host; only one host can be local"
        if not _same_place(a, b):
            continue
        for field in ("state_dir", "run_dir", "lxc_dir"):
            if getattr(a, field) == getattr(b, field):
                yield (
                    f"hosts[{j}].{field}: {getattr(b, field)} is also hosts[{i}].{field} on the same machine "
                    f"({a.name}, {b.name}); give each host its own"
                )
        taken = {a.network.nat_bridge.name, a.network.cluster_bridge.name}
        for field in ("nat_bridge", "cluster_bridge"):
            name = getattr(b.network, field).name
            if name in taken:
                yield (
                    f"hosts[{j}].network.{field}.name: {name!r} is also a bridge of hosts[{i}] on the same machine "
                    f"({a.name}, {b.name}); give each host its own bridges"
                )
    controller = c.slurm.controller
    if controller.host is not None and controller.placement != "host":
        yield "slurm.controller.host: only valid with placement 'host' (the container's host is its node's)"
    for i, host in enumerate(hosts):
        if host.retired and not host.is_ssh:
            yield f"hosts[{i}].retired: only a host reached over SSH can be retired; {host.name!r} is this machine"


def _route_addresses(hosts: list) -> Iterator[str]:
    """The address the other hosts route a host's containers through is a real one, outside
    every container subnet (a route via an address inside the subnet it leads to is refused)."""
    for i, host in enumerate(hosts):
        address = host.address
        if address is None:
            continue
        if address.is_loopback or address.is_unspecified or address.is_multicast or address.is_reserved:
            yield (
                f"hosts[{i}].address: {address} is a loopback, unspecified, multicast or reserved address; "
                "give the address the other hosts reach this one at"
            )
            continue
        for j, other in enumerate(hosts):
            for field, net in host_subnets(other):
                if address in net:
                    yield f"hosts[{i}].address: {address} is inside hosts[{j}].{field} {net}, a container subnet"


def _same_place(a, b) -> bool:
    """Two hosts reached at the same SSH address (and a local one) may be one machine: every
    spelling of this machine (127.0.0.0/8, localhost) is the local host; an EC2 instance is a
    machine of its own."""
    if a.is_ec2 or b.is_ec2:
        return False
    addr_a = a.connection.address if a.is_ssh else None
    addr_b = b.connection.address if b.is_ssh else None
    return same_machine_key(addr_a) == same_machine_key(addr_b)
