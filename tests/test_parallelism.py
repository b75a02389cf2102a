"""The steps at once ./pulumi.sh gives `pulumi up` (tools/parallelism.py: nodes + 16) cover the
program's own: never fewer than the most command steps that are ready together."""

import os
import subprocess
from collections import Counter

import pytest
import yaml

from tests.benchmark_bringup import bench_config
from tests.harness.command_executor import host_commands
from tests.harness.program_harness import ROOT, run_program, stack_config
from tools import parallelism


def widest(commands) -> int:
    """The most commands ready at once when every step takes as long: the largest set at one
    depth of the dependency graph (every node's container, then every node's slurmd)."""
    by_urn = {c.urn: c for c in commands}
    depth: dict[str, int] = {}

    def of(urn: str) -> int:
        if urn not in depth:
            depth[urn] = 1 + max((of(d) for d in by_urn[urn].dependencies if d in by_urn), default=-1)
        return depth[urn]

    return max(Counter(of(urn) for urn in by_urn).values())


@pytest.mark.parametrize("stack", ["nogpu", "local", "e2e"])
def test_the_example_stacks_steps_at_once_fit(stack):
    config = stack_config(stack)
    chosen, why = parallelism.for_config(config)
    nodes = len(config["cluster"]["nodes"])
    assert chosen == nodes + parallelism.BESIDE_NODES and why.startswith(f"{nodes} nodes + 16")
    assert widest(host_commands(run_program(config, stack=stack))) <= chosen


def test_a_16_node_cluster_s_steps_at_once_fit():
    config = bench_config(16)
    width = widest(host_commands(run_program(config, stack="bench")))
    assert width >= 16  # every node's container create is ready at once
    assert width <= parallelism.for_config(config)[0] == 32


def test_a_stack_without_nodes_gets_the_room_beside_them():
    assert parallelism.for_config({"kubernetes": {}}) == (16, "no cluster nodes")
    assert parallelism.for_config({}) == (16, "no cluster nodes")


@pytest.mark.parametrize(
    ("args", "value"),
    [
        (["--parallel", "4"], "4"),
        (["-p", "4"], "4"),
        (["-p4"], "4"),
        (["-p=4"], "4"),
        (["-yfp", "4"], "4"),
        (["--parallel=4"], "4"),
        (["--stack", "p"], None),
        (["--yes"], None),
        (["--", "-p", "4"], None),
    ],
)
def test_an_explicit_parallel_is_found_in_any_of_its_forms(args, value):
    assert parallelism.given(args) == value


@pytest.mark.parametrize(("value", "read"), [("5", 5), ("0", None), ("-3", None), ("x", None), ("", None)])
def test_pulumi_parallel_counts_only_as_a_positive_integer(value, read):
    assert parallelism.env_parallel({"PULUMI_PARALLEL": value}) == read


def deploy_steps() -> list[dict]:
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "deploy.yml").read_text())
    return workflow["jobs"]["deploy"]["steps"]


@pytest.mark.parametrize(("variable", "value"), [("", "20"), ("7", "7")])
def test_the_ci_deploy_runs_up_with_the_stack_s_steps_at_once_or_the_repository_s(tmp_path, variable, value):
    steps = deploy_steps()
    (up,) = [step for step in steps if step.get("uses", "").startswith("pulumi/actions@")]
    assert up["with"]["parallel"] == "${{ steps.parallel.outputs.value }}"
    (chosen,) = [step for step in steps if step.get("id") == "parallel"]
    assert steps.index(chosen) < steps.index(up)
    assert chosen["env"] == {"PULUMI_PARALLEL": "${{ vars.PULUMI_PARALLEL }}", "STACK": "${{ matrix.stack }}"}
    output = tmp_path / "github-output"
    done = subprocess.run(
        ["bash", "-e", "-c", chosen["run"]],
        cwd=ROOT,
        env={**os.environ, "PULUMI_PARALLEL": variable, "STACK": "nogpu", "GITHUB_OUTPUT": str(output)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert output.read_text() == f"value={value}\n"
    assert "steps at once" in done.stderr
