"""The cluster's rule on the web app's GPUs (registered in components/composition/config.py)."""

from collections.abc import Iterator

from components.common.config_types import duplicates


def rule_web_app_gpus(c) -> Iterator[str]:
    """The app's GPUs are declared devices; unless shared, they are taken out of the nodes' pool."""
    if not c.web_app:
        return
    for path in duplicates(c.web_app.gpus):
        yield f"web_app.gpus: {path} is listed more than once"
    host = c.node_host(c.web_app)
    prefix = f"hosts[{c.cluster_hosts.index(host)}]." if c.multi_host else ""
    for i, path in enumerate(c.web_app.gpus):
        if path not in host.gpu.devices:
            yield f"web_app.gpus[{i}]: {path} is not one of {prefix}gpu.devices"
    if c.web_app.share_gpus and not c.web_app.gpus:
        yield "web_app.share_gpus: true but web_app.gpus lists no device to share"
