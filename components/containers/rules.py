"""The cluster's rule on jobs in container images (registered in components/composition/config.py)."""

from collections.abc import Iterator

from components.lxc.rules import INTERNAL_CONTAINER_NAMES


def rule_containers(c) -> Iterator[str]:
    """Burst nodes boot an AMI of their own, without Enroot and Pyxis: plugstack.conf would make
    every job there fail (Pyxis is `required`), and an optional Pyxis would run a job asking for
    a container image outside it. Containers and burst partitions do not mix."""
    if c.containers_enabled and c.burst is not None:
        yield (
            "containers: burst nodes have no Enroot or Pyxis (their AMI), so no job could start there; "
            "set `containers: {enabled: false}` for a cluster with burst partitions"
        )


def rule_registry_name(c) -> Iterator[str]:
    """The stack's registry has a container of its own: no other container of the cluster may
    have its name."""
    registry = c.stack_registry
    if registry is None:
        return
    others = [*(name for _, name in c.named_containers), *INTERNAL_CONTAINER_NAMES]
    if registry.name in others:
        yield (
            f"containers.registry.name: {registry.name!r} is also a node, web_app, login, accounting, metrics, "
            "controller or the image's name; the registry's container needs a name of its own"
        )
