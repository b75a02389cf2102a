"""The cluster's rule on jobs in container images (registered in components/composition/config.py)."""

from collections.abc import Iterator


def rule_containers(c) -> Iterator[str]:
    """Burst nodes boot an AMI of their own, without Enroot and Pyxis: plugstack.conf would make
    every job there fail (Pyxis is `required`), and an optional Pyxis would run a job asking for
    a container image outside it. Containers and burst partitions do not mix."""
    if c.containers_enabled and c.burst is not None:
        yield (
            "containers: burst nodes have no Enroot or Pyxis (their AMI), so no job could start there; "
            "set `containers: {enabled: false}` for a cluster with burst partitions"
        )
