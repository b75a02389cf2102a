"""Every stack file under stacks/ validates and the whole program runs for it under mocks."""

import pytest

from review import program
from tests.harness.program_harness import ROOT, run_program, stack_config

STACKS = sorted(
    path.name.removeprefix("Pulumi.").removesuffix(".yaml") for path in (ROOT / "stacks").glob("Pulumi.*.yaml")
)


def test_the_stacks_are_there():
    assert {"local", "e2e", "k8s"} <= set(STACKS)
    assert (ROOT / "Pulumi.yaml").read_text().count("stackConfigDir: stacks") == 1


def stand_in_secrets(config: dict) -> dict[str, str]:
    """A value for each secret an SSH host names (`pulumi config set --secret` on a real stack)."""
    hosts = (config.get("cluster") or {}).get("hosts") or []
    names = [
        h["connection"]["private_key_secret"] for h in hosts if h.get("connection", {}).get("kind") in ("ssh", "ec2")
    ]
    return {name: "stand-in private key" for name in names}


@pytest.mark.parametrize("stack", STACKS)
def test_program_runs_for_stack(stack):
    config = program.stack_config(stack)  # the file in stacks/, as a site has it
    run = run_program(config, stack=stack, secrets=stand_in_secrets(config))
    types = {resource.type for resource in run.resources}
    assert ("gpu-cluster:cluster:GpuCluster" in types) == ("cluster" in config)
    assert ("kubernetes:apps/v1:Deployment" in types) == ("kubernetes" in config)
    assert run.outputs


def test_a_stack_can_have_the_local_cluster_and_kubernetes_side_by_side():
    config = {**stack_config("local"), **stack_config("k8s")}
    run = run_program(config, stack="both")
    assert run.by_name("gpu").type == "gpu-cluster:cluster:GpuCluster"
    assert run.by_name("k8s-web-app-deployment").type == "kubernetes:apps/v1:Deployment"
    assert {"node_list", "k8s_web_app_service"} <= set(run.outputs)


def test_the_gpu_less_stack_a_newcomer_brings_up_leaves_the_end_to_end_tests_room():
    """./up.sh without a driver brings up `nogpu`; ./test.sh then runs beside it: its bridges
    and forwarded port are nothing the end-to-end tests claim (tests/harness/host_claims.py)."""
    from tests.harness.host_claims import HostFacts, Link, conflicts

    cluster = program.stack_config("nogpu")["cluster"]
    network = cluster["network"]
    port = cluster["web_app"]["host_port"]
    rule = f'-A PREROUTING -p tcp -m tcp --dport {port} -m comment --comment "gpucluster:nogpu:fwd:{port}" -j DNAT'
    subnet = network["cluster_bridge"]["subnet"]
    gateway = subnet.replace(".0/", ".254/")
    facts = HostFacts(
        listening=set(),
        nat_rules=[rule],
        links=[
            Link(network["nat_bridge"]["name"], "gpucluster:nogpu", [network["nat_bridge"]["address"]]),
            Link(network["cluster_bridge"]["name"], "gpucluster:nogpu", [gateway]),
        ],
    )
    assert conflicts(facts) == []
