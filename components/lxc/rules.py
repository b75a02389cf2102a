"""The cluster's rules on containers and GPU devices (registered in components/composition/config.py).

Each rule takes the composed cluster and yields messages naming the field and what it accepts.
"""

import re
from collections.abc import Iterator

from components.common.config_types import duplicates, is_within
from components.lxc.config import stand_in_devices

# Containers the program names itself (`<cluster>-<name>`): no node or web app may take them.
INTERNAL_CONTAINER_NAMES = frozenset({"image"})


def rule_unique_node_names(c) -> Iterator[str]:
    names = c.node_names + ([c.web_app.name] if c.web_app else []) + ([c.login.name] if c.login else [])
    for name in duplicates(names):
        yield (
            f"nodes[].name: {name!r} is used more than once (node, web_app, login and accounting names must be unique)"
        )
    if "image" in names:
        yield "nodes[].name: 'image' is the node image's container; pick another name"
    if c.metrics_enabled and c.metrics.name in [*names, *([c.accounting.name] if c.accounting else [])]:
        yield (
            f"metrics.name: {c.metrics.name!r} is also a node, web_app or accounting name; the metrics container "
            "needs a name of its own"
        )
    if c.slurm.controller.placement == "host" and c.slurm.controller.name in [
        *names,
        *([c.accounting.name] if c.accounting else []),
        *([c.metrics.name] if c.metrics_enabled else []),
    ]:
        yield (
            f"slurm.controller.name: {c.slurm.controller.name!r} is also a node, web_app, accounting or metrics "
            "name; the controller's container needs a name of its own"
        )
    if c.accounting and c.accounting.name in names:
        yield (
            f"accounting.name: {c.accounting.name!r} is also a node or web_app name; the database container "
            "needs a name of its own (node, web_app and accounting names must be unique)"
        )


def rule_gpu_devices(c) -> Iterator[str]:
    for prefix, host, _ in c.each_host():
        for path in duplicates(host.gpu.devices):
            yield f"{prefix}gpu.devices: {path} is listed more than once"
        basenames = [path.rsplit("/", 1)[-1] for path in host.gpu.devices + host.gpu.control_devices]
        for name in duplicates(basenames):
            yield f"{prefix}gpu.devices: two devices would both appear as /dev/{name} in the containers"


def rule_stand_in_gpus(c) -> Iterator[str]:
    for prefix, host, _ in c.each_host():
        gpu = host.gpu
        if gpu.stand_in is None:
            continue
        devices, control_devices = stand_in_devices(c.host_device_dir(host), gpu.stand_in.count)
        for field, wanted, given in (
            (f"{prefix}gpu.devices", devices, gpu.devices),
            (f"{prefix}gpu.control_devices", control_devices, gpu.control_devices),
        ):
            if given != wanted:
                yield (
                    f"{field}: cannot be set together with {prefix}gpu.stand_in, whose stand-ins are the "
                    f"devices ({', '.join(wanted)}); remove {field}, or remove {prefix}gpu.stand_in to use real GPUs"
                )


def rule_gpus_match_devices(c) -> Iterator[str]:
    """A node's GPUs come from its own host's gpu.devices (or its stand-ins), less the web app's."""
    for prefix, host, nodes in c.each_host():
        gpu = host.gpu
        declared = len(c.host_gpu_pool(host))
        reserved = len(gpu.devices) - declared
        besides = f" besides the web app's {reserved}" if reserved else ""
        source = f"{prefix}gpu.stand_in.count" if gpu.stand_in else f"{prefix}gpu.devices"
        if gpu.share_between_nodes:
            yield (
                f"{prefix}gpu.share_between_nodes: true is no longer accepted: nodes each claiming the same GPU "
                "let Slurm start several jobs that each believe they have the whole GPU. Give the GPU to one node "
                "and let jobs share it as Slurm shards: remove share_between_nodes, set nodes[].gpus: 0 on the "
                "other nodes and nodes[].gpu_shards on the GPU's node (docs/changes.md)"
            )
            continue
        wanted = sum(node.gpus for _, node in nodes)
        if wanted > declared:
            on = f" on host {host.name!r}" if c.multi_host else ""
            more = f"raise {prefix}gpu.stand_in.count" if gpu.stand_in else "add devices"
            yield (
                f"nodes[].gpus: the nodes{on} ask for {wanted} GPUs in all but {source} declares "
                f"{declared}{besides}; {more}, or lower nodes[].gpus (several jobs share a GPU as "
                "Slurm shards: nodes[].gpu_shards)"
            )


def rule_gpu_shards(c) -> Iterator[str]:
    """Shards split a node's own GPUs: a node without GPUs has none to split."""
    for i, node in enumerate(c.nodes):
        if node.gpu_shards and not node.gpus:
            yield f"nodes[{i}].gpu_shards: {node.name} has no GPU to share (nodes[{i}].gpus is 0)"


# A GPU's device node: nvidia0, nvidia1... (nvidiactl, nvidia-uvm, nvidia-modeset are the driver's).
GPU_DEVICE_NAME = re.compile(r"^nvidia[0-9]+$")


def rule_device_paths(c) -> Iterator[str]:
    for h, host in enumerate(c.cluster_hosts):
        _, gpu_at = c.host_prefixes(h)
        device_dir = c.host_device_dir(host)
        devices = [(f"{gpu_at}devices[{i}]", path) for i, path in enumerate(host.gpu.devices)]
        devices += [(f"{gpu_at}control_devices[{i}]", path) for i, path in enumerate(host.gpu.control_devices)]
        for field, path in devices:
            directory, _, name = path.rpartition("/")
            if not (is_within(directory, "/dev") or is_within(directory, device_dir)):
                yield (
                    f"{field}: {path} must be a device node under /dev or the cluster's private device "
                    f"directory {device_dir}"
                )
            elif not name.startswith("nvidia"):
                yield f"{field}: {path} is not an NVIDIA device node (its name must start with 'nvidia')"
            elif field.split(".")[-1].startswith("devices[") and not GPU_DEVICE_NAME.match(name):
                yield (
                    f"{field}: {path} is not a GPU (a GPU is nvidia<N>; {name} is a driver control device, "
                    "which goes under control_devices)"
                )
