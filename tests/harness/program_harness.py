"""The program under mocks, as the tests use it: the recorder lives in review/program.py, shared
with the offline render (`python -m review.render`).

Tests read the example stacks from their own copies in tests/fixtures/stacks/, so a site that
edits its stacks/Pulumi.local.yaml (adds a node, changes a port) breaks no test. The `e2e`
stack, the tests' own, has no copy and is read from stacks/.
"""

import os
from pathlib import Path
from typing import Any

from components.composition.config import ClusterConfig
from components.composition.node_memory import shares, with_shares
from components.host.host_size import HostSize, parse_host_size
from components.slurm.slurm_conf import render_slurm_conf
from review import program
from review.program import PROJECT, ROOT, ProgramRun, Registration, run_program

FIXTURES = ROOT / "tests" / "fixtures" / "stacks"

__all__ = ["FIXTURES", "PROJECT", "ROOT", "ProgramRun", "Registration", "fixture_file", "run_program", "stack_config"]


def fixture_file(stack: str) -> Path:
    """The test's copy of an example stack, else (the e2e stack) the shipped file."""
    copy = FIXTURES / f"Pulumi.{stack}.yaml"
    return copy if copy.exists() else ROOT / "stacks" / f"Pulumi.{stack}.yaml"


def measured(config):
    """`config` with the memory of nodes without memory_mb known: each host measured as the
    program's runs here measure it (review.program.MEASURED_HOST)."""
    size = parse_host_size(program.MEASURED_HOST)
    return with_shares(config, {host.name: size for host in config.cluster_hosts})


def slurm_conf_of(config, controller_hostname: str, munge_socket: str | None = None) -> str:
    """The slurm.conf the program renders for `config` on hosts measured as its runs here are."""
    return render_slurm_conf(measured(config), controller_hostname, munge_socket)


def nodes_whose_share_changes(old: dict, new: dict, host_cpus: int | None = None) -> list[str]:
    """The nodes of both one-host stack configs whose share of the host (no memory_mb) differs
    between them on a host of `host_cpus` CPUs (default: this machine's): a node added where the
    nodes already share the host's CPUs shrinks the others' shares, else none changes."""
    size = HostSize(1_000_000, host_cpus or os.sysconf("SC_NPROCESSORS_ONLN"))
    before, after = (
        shares(config, config.cluster_hosts[0], size)
        for config in (ClusterConfig.model_validate(c["cluster"]) for c in (old, new))
    )
    return sorted(name for name in before.keys() & after.keys() if before[name] != after[name])


def stack_config(stack: str) -> dict[str, Any]:
    return program.stack_config(stack, fixture_file(stack).parent)
