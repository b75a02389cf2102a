"""The cluster's rules on Slurm names, the controller, partitions and accounting (registered
in components/composition/config.py).

Each rule takes the composed cluster and yields messages naming the field and what it accepts.
"""

from collections.abc import Iterator

from components.common.config_types import duplicates
from components.lxc.rules import INTERNAL_CONTAINER_NAMES
from components.slurm.config import (
    LOGIN_ID_RANGE,
    SACCTMGR_KEYWORDS,
    SLURM_RESERVED_NODE_NAMES,
    SLURM_RESERVED_PARTITION_NAMES,
)


def rule_names_slurm_and_lxc_can_use(c) -> Iterator[str]:
    for i, node in enumerate(c.nodes):
        if node.name.lower() in SLURM_RESERVED_NODE_NAMES:
            yield (
                f"nodes[{i}].name: {node.name!r} is a word Slurm reserves "
                f"({', '.join(sorted(SLURM_RESERVED_NODE_NAMES))}); pick another name"
            )
    for i, partition in enumerate(c.slurm.partitions):
        if partition.name.lower() in SLURM_RESERVED_PARTITION_NAMES:
            yield f"slurm.partitions[{i}].name: {partition.name!r} is a word Slurm reserves; pick another name"
    for field, name in c.named_containers:
        if name in INTERNAL_CONTAINER_NAMES:
            yield (
                f"{field}: {name!r} would be the container {c.container_name(name)}, which the program "
                "uses itself (the node image); pick another name"
            )


def rule_controller_node(c) -> Iterator[str]:
    controller = c.slurm.controller
    if controller.node is None:
        return
    if controller.placement == "host":
        yield "slurm.controller.node: only valid with placement 'container' (placement is 'host')"
    elif controller.node not in c.node_names:
        yield f"slurm.controller.node: {controller.node!r} is not one of nodes[].name {c.node_names}"


def rule_partitions(c) -> Iterator[str]:
    partitions = c.slurm.partitions
    for name in duplicates([p.name for p in partitions]):
        yield f"slurm.partitions[].name: {name!r} is used more than once"
    defaults = [p.name for p in partitions if p.default]
    if len(defaults) != 1:
        yield f"slurm.partitions[].default: exactly one partition must be default, got {defaults}"
    for i, partition in enumerate(partitions):
        if partition.nodes == []:
            yield (
                f"slurm.partitions[{i}].nodes: empty; list the partition's nodes, or leave nodes out to mean every node"
            )
        for name in partition.nodes or []:
            if name not in c.node_names:
                yield f"slurm.partitions[{i}].nodes: {name!r} is not one of nodes[].name"


def rule_accounting(c) -> Iterator[str]:
    if not c.accounting:
        return
    database = c.accounting_host
    if database.retired:
        which = "named" if c.accounting.host else "default: the controller's host"
        yield (
            f"accounting.host: the database's host {database.name!r} ({which}) is retired; "
            "the database needs a live host (name one in accounting.host)"
        )
    accounting, users = c.accounting, {u.name for u in c.users}
    qos = [q.name for q in accounting.qos]
    for name in duplicates(qos):
        yield f"accounting.qos[].name: {name!r} is listed more than once"
    for name in duplicates([a.name for a in accounting.accounts]):
        yield f"accounting.accounts[].name: {name!r} is listed more than once"
    keywords = f"a word sacctmgr reads as a keyword ({', '.join(sorted(SACCTMGR_KEYWORDS))}); pick another name"
    for i, name in enumerate(qos):
        if name in SACCTMGR_KEYWORDS:
            yield f"accounting.qos[{i}].name: {name!r} is {keywords}"
    for i, account in enumerate(accounting.accounts):
        if account.name == "root":
            yield f"accounting.accounts[{i}].name: 'root' is Slurm's own account; pick another name"
        if account.name in SACCTMGR_KEYWORDS:
            yield f"accounting.accounts[{i}].name: {account.name!r} is {keywords}"
        for user in account.users:
            if user in SACCTMGR_KEYWORDS:
                yield f"accounting.accounts[{i}].users: {user!r} is {keywords}"
        for user in account.users:
            if user not in users:
                yield f"accounting.accounts[{i}].users: {user!r} is not one of users[].name"
        for name in duplicates(account.users):
            yield f"accounting.accounts[{i}].users: {name!r} is listed more than once"
        for name in account.qos:
            if name not in qos and name != "normal":
                yield f"accounting.accounts[{i}].qos: {name!r} is not one of accounting.qos[].name (or 'normal')"
        if account.default_qos and account.default_qos not in (account.qos or ["normal"]):
            yield f"accounting.accounts[{i}].default_qos: {account.default_qos!r} is not one of the account's qos"
    if "normal" in qos:
        yield "accounting.qos[].name: 'normal' is Slurm's own QOS; pick another name"


def rule_login(c) -> Iterator[str]:
    """A login node serves the people of users[] who have a key: without any, nobody could log in.
    Its user namespace keeps the people's ids: the kernel takes at most ID_MAP_MAX_LINES ranges."""
    if c.login and not any(user.ssh_keys for user in c.users):
        yield "login: no person of users[] has ssh_keys, so nobody could log in; add a key (users[].ssh_keys)"
    if c.login:
        from components.slurm.login import ID_MAP_MAX_LINES, id_map_ranges

        for kind, ids in (("uid", {user.uid for user in c.users}), ("gid", {user.gid for user in c.users})):
            lines = len(id_map_ranges(ids, LOGIN_ID_RANGE))
            if lines > ID_MAP_MAX_LINES:
                yield (
                    f"users[].{kind}: the login node keeps each person's {kind}, and these {len(ids)} {kind}s need "
                    f"{lines} ranges in its user namespace, more than the kernel's {ID_MAP_MAX_LINES}: give people "
                    f"consecutive {kind}s"
                )
