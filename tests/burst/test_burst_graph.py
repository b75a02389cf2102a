"""The burst partition's AWS graph under mocks: launch templates, the network with its VPN and
no NAT, the controller's scoped credentials, the destroy hook's order, and the cost."""

import base64
import json

import pytest

from components.aws.prices import PRICES
from tests.burst.stack import burst_stack
from tests.harness.command_executor import unwrap
from tests.harness.program_harness import run_program, stack_config

TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"


@pytest.fixture(scope="module")
def run():
    return run_program(burst_stack(), stack="burst")


def test_a_launch_template_per_type_pinned_imdsv2_encrypted_tagged(run):
    templates = {r.inputs["name"]: r for r in run.of_type(TEMPLATE)}
    assert sorted(templates) == ["gpu-burst-g4dn-xlarge", "gpu-burst-g5-xlarge"]
    for name, template in templates.items():
        inputs = template.inputs
        assert inputs["imageId"] == "ami-0a1b2c3d4e5f67890"
        assert inputs["instanceType"] == name.removeprefix("gpu-burst-").replace("-xlarge", ".xlarge")
        metadata = inputs["metadataOptions"]
        assert metadata["httpTokens"] == "required" and metadata["httpPutResponseHopLimit"] == 1
        ebs = inputs["blockDeviceMappings"][0]["ebs"]
        assert ebs["encrypted"] == "true" and ebs["volumeType"] == "gp3"
        assert inputs["vpcSecurityGroupIds"] == ["gpu-burst-sg-id"]
        for spec in inputs["tagSpecifications"]:
            assert spec["tags"]["gpucluster:cluster"] == "gpu" and spec["tags"]["gpucluster:burst"] == "burst"
        assert "instanceMarketOptions" not in inputs  # on demand


def test_the_template_user_data_holds_no_key_and_no_node_name(run):
    for template in run.of_type(TEMPLATE):
        user_data = base64.b64decode(unwrap(template.inputs["userData"])).decode()
        assert "NODE_NAME=@NODE_NAME@" in user_data and "CONTROLLER=10.42.3.2" in user_data
        assert "SECRET_ID=gpucluster/gpu/munge-key" in user_data
        assert "PRIVATE" not in user_data and "munge.key" in user_data  # the path, fetched at boot


def test_spot_is_asked_by_the_fleet_not_the_template():
    """EC2 Fleet refuses a launch template with market options (the programs ask for spot)."""
    config = burst_stack()
    config["cluster"]["burst"]["partitions"][0]["capacity"] = "spot"
    for template in run_program(config, stack="burst").of_type(TEMPLATE):
        assert "instanceMarketOptions" not in template.inputs


def test_the_network_reaches_on_premises_by_vpn_only_no_nat_no_internet(run):
    types = {r.type for r in run.resources}
    assert "aws:ec2/natGateway:NatGateway" not in types and "aws:ec2/internetGateway:InternetGateway" not in types
    route = run.by_name("gpu-burst-route0")
    assert route.inputs["destinationCidrBlock"] == "10.42.0.0/16" and route.inputs["gatewayId"] == "gpu-burst-vgw-id"
    vpn = run.by_name("gpu-burst-vpn")
    assert vpn.inputs["staticRoutesOnly"] is True
    assert run.by_name("gpu-burst-vpn-route0").inputs["destinationCidrBlock"] == "10.42.0.0/16"
    zones = [run.by_name(f"gpu-burst-subnet{i}").inputs["availabilityZone"] for i in (0, 1)]
    assert zones == ["us-east-1a", "us-east-1b"]
    ingress = run.by_name("gpu-burst-sg").inputs["ingress"]
    assert ingress[0]["cidrBlocks"] == ["10.42.0.0/16"] and ingress[1]["self"] is True


def test_the_controller_policy_is_scoped_to_the_tag_and_the_templates(run):
    policy = json.loads(unwrap(run.by_name("gpu-burst-controller-policy").inputs["policy"]))
    statements = {s["Sid"]: s for s in policy["Statement"]}
    launch = statements["OnlyInstancesTaggedForTheCluster"]
    assert launch["Condition"]["StringEquals"] == {
        "aws:RequestTag/gpucluster:cluster": "gpu",
        "ec2:InstanceType": ["g5.xlarge", "g4dn.xlarge"],  # N15: the configured types only
    }
    assert sorted(launch["Condition"]["ArnLike"]["ec2:LaunchTemplate"]) == sorted(
        statements["LaunchFromTheClusterTemplates"]["Resource"][:2]
    )
    terminate = statements["TerminateTheClusterBurstInstancesOnly"]
    assert terminate["Condition"]["StringEquals"] == {"ec2:ResourceTag/gpucluster:cluster": "gpu"}
    assert terminate["Condition"]["StringLike"] == {"ec2:ResourceTag/gpucluster:burst": "*"}  # N1: not the hosts
    actions = {a for s in policy["Statement"] for a in s["Action"]}
    assert not any(a.endswith("*") for a in actions) and "ec2:StopInstances" not in actions
    node = json.loads(unwrap(run.by_name("gpu-burst-node-policy").inputs["policy"]))
    assert node["Statement"] == [
        {"Effect": "Allow", "Action": ["secretsmanager:GetSecretValue"], "Resource": ["gpu-burst-munge-key-arn"]}
    ]


def test_the_controller_key_and_the_vpn_keys_are_secret_outputs(run):
    key = run.by_name("gpu-burst-controller-key")
    assert "secret" in key.additional_secret_outputs
    vpn = run.by_name("gpu-burst-vpn")
    assert {"tunnel1PresharedKey", "tunnel2PresharedKey"} <= set(vpn.additional_secret_outputs)


def test_destroy_terminates_tagged_instances_before_the_templates_and_network_go(run):
    hook = run.by_name("gpu-burst-terminate-instances")
    for name in (
        "gpu-burst-burst-g5-xlarge",
        "gpu-burst-burst-g4dn-xlarge",
        "gpu-burst-subnet0",
        "gpu-burst-subnet1",
        "gpu-burst-route0",
        "gpu-burst-sg",
        "gpu-burst-node-profile",
    ):
        assert run.depends_on(hook.name, name), name
    assert "tag:gpucluster:cluster" in hook.inputs["delete"] and "wait instance-terminated" in hook.inputs["delete"]
    assert hook.inputs["environment"]["CLUSTER"] == "gpu"
    # The controller's programs go before it: nothing launches an instance after it ran.
    assert run.depends_on("gpu-burst-programs-install", hook.name)


def test_cost_gains_the_node_hour_and_the_most_per_hour(run):
    burst = run.outputs["cost"]["burst"]
    g5, g4dn = PRICES["us-east-1"]["g5.xlarge"], PRICES["us-east-1"]["g4dn.xlarge"]
    assert burst["partitions"]["burst"]["node_hour_usd"] == {"g5.xlarge": g5, "g4dn.xlarge": g4dn}
    assert burst["max_hourly_usd"] == round(4 * g5, 4) == 4.024


def test_without_burst_nothing_of_it():
    run = run_program(stack_config("local"))
    assert not [r for r in run.resources if "burst" in r.name] and "cost" not in run.outputs


def test_the_programs_go_to_the_controller_container_with_the_key_by_stdin_only(run):
    install = run.by_name("gpu-burst-programs-install")
    environment = install.inputs["environment"]
    assert environment["CONTAINER"] == "gpu-c000" and environment["MUNGE_KEY_FILE"].endswith("/gpu/munge.key")
    assert "boto3==1.44.5 \\\n    --hash=sha256:" in environment["REQUIREMENTS_LOCK"]
    assert "def main" in environment["RESUME_PY"]
    config = json.loads(unwrap(environment["CONFIG_JSON"]))
    assert config["subnets"] == ["gpu-burst-subnet0-id", "gpu-burst-subnet1-id"]
    assert config["partitions"][0]["types"][0] == {"name": "g5.xlarge", "template": "gpu-burst-g5-xlarge"}
    assert "NODE_NAME=@NODE_NAME@" in config["user_data"]
    # The controller's key: only in stdin, and that is secret.
    assert install.secret_paths == {"stdin"}
    assert run.depends_on(install.name, "gpu-slurm-slurmctld")
    assert not [k for k in environment if "KEY" in k and k != "STORE_MUNGE_KEY_PY" and k != "MUNGE_KEY_FILE"]


def test_changing_a_burst_type_changes_its_template_the_policy_and_the_programs_config_only(run):
    config = burst_stack()
    config["cluster"]["burst"]["partitions"][0]["instance_types"][1] = {"name": "g6.xlarge", "gpus": 1}
    changed_run = run_program(config, stack="burst")
    before = {r.urn: r.inputs for r in run.resources if r.custom}
    after = {r.urn: r.inputs for r in changed_run.resources if r.custom}
    short = lambda urns: sorted(u.rsplit("::", 1)[1] for u in urns)  # noqa: E731
    assert short(before.keys() - after.keys()) == ["gpu-burst-burst-g4dn-xlarge"]
    assert short(after.keys() - before.keys()) == ["gpu-burst-burst-g6-xlarge"]
    changed = short(
        u
        for u in before.keys() & after.keys()
        if json.dumps(before[u], default=str) != json.dumps(after[u], default=str)
    )
    # The controller's scope and the programs' config follow; no container, node or slurmctld changes.
    assert changed == ["gpu-burst-controller-policy", "gpu-burst-programs-install"], changed


def test_the_controllers_host_routes_the_burst_vpc_via_the_vpn_router_without_masquerading(run):
    routes = run.by_name("gpu-local-routes")
    # `burst`: the route's rules are the RETURN only; the VPC gets no blanket accept into the bridge.
    assert unwrap(routes.inputs["environment"]["ROUTES"]).split() == ["10.90.0.0/16,192.168.1.254,burst"]
    assert "-j RETURN" in routes.inputs["create"]  # ahead of the NAT bridge's MASQUERADE
    assert run.depends_on("gpu-slurm-slurmctld", "gpu-local-routes")


def test_burst_nodes_are_admitted_into_the_nat_bridge_to_slurm_only(run):
    """The NAT bridge refuses new connections (components/files/lib/bridges.sh inbound_rules) but
    from the burst subnets to slurmctld's container (6817) and to the nodes' slurmd and srun ports;
    the boot unit and verify read the same, with the route (a one-host stack too)."""
    from components.composition.config import ClusterConfig
    from components.composition.host_state import host_state
    from components.slurm.slurm_conf import SRUN_PORTS

    sources = "10.90.1.0/24+10.90.2.0/24"
    config = ClusterConfig.model_validate(burst_stack()["cluster"])
    nodes = "+".join(str(node.nat_address) for node in config.nodes)
    srun = f"{SRUN_PORTS[0]}:{SRUN_PORTS[1]}"
    expected = f"{sources},{config.controller_address},6817 {sources},{nodes},6818+{srun}"
    assert unwrap(run.by_name("gpu-bridges-nat").inputs["environment"]["BURST_ACCESS"]) == expected
    assert "BURST_ACCESS" not in run.by_name("gpu-bridges-cluster").inputs["environment"]
    state = host_state(config)
    assert state["BURST_ACCESS"] == expected and state["ROUTES"] == "10.90.0.0/16,192.168.1.254,burst"
    conf = unwrap(run.by_name("gpu-slurm-slurmctld").inputs["environment"]["SLURM_CONF_TEXT"])
    assert f"SrunPortRange={SRUN_PORTS[0]}-{SRUN_PORTS[1]}\n" in conf


def test_a_burst_type_with_more_gpus_changes_slurm_conf_and_touches_no_running_node(run):
    """What the preview of a burst type change shows: the template, the controller's scope,
    the programs' config and slurm.conf (the cloud nodes' GRES); no node container, no slurmd."""
    config = burst_stack()
    partition = config["cluster"]["burst"]["partitions"][0]
    # A node's Gres is what every type of its partition has (the fewest GPUs of them).
    partition["instance_types"] = [{"name": "g5.12xlarge", "gpus": 4}, {"name": "g4dn.12xlarge", "gpus": 4}]
    changed_run = run_program(config, stack="burst")
    before = {r.urn: r.inputs for r in run.resources if r.custom}
    after = {r.urn: r.inputs for r in changed_run.resources if r.custom}
    changed = sorted(
        u.rsplit("::", 1)[1]
        for u in before.keys() & after.keys()
        if json.dumps(before[u], default=str) != json.dumps(after[u], default=str)
    )
    assert "gpu-slurm-slurmctld" in changed, changed
    assert not [name for name in changed if name.endswith(("-lxc", "-slurmd"))], changed
    conf = lambda r: unwrap(r.by_name("gpu-slurm-slurmctld").inputs["environment"]["SLURM_CONF_TEXT"])  # noqa: E731
    assert "Gres=gpu:4" in conf(changed_run) and "Gres=gpu:4" not in conf(run)


def test_burst_nodes_reach_slurmctlds_own_container_with_placement_host():
    """placement 'host': slurmctld in its own container on the NAT bridge, which the burst
    subnets are admitted to on slurmctld's port (not a node's address)."""
    from components.composition.config import ClusterConfig

    stack = burst_stack()
    stack["cluster"]["slurm"]["controller"] = {"placement": "host"}
    config = ClusterConfig.model_validate(stack["cluster"])
    run = run_program(stack, stack="gpu")
    access = unwrap(run.by_name("gpu-bridges-nat").inputs["environment"]["BURST_ACCESS"]).split()
    controller = str(config.controller_address)
    assert access[0] == f"10.90.1.0/24+10.90.2.0/24,{controller},6817"
    assert controller not in {str(node.nat_address) for node in config.nodes}
