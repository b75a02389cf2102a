"""gpu-cluster: load the stack's typed config, build the graph, export its outputs."""

import pulumi

from components.common.registration import send_only_the_registering_frame
from components.composition.stack_config import load_stack_config

send_only_the_registering_frame()
stack = load_stack_config()

if stack.cluster:
    from components.composition.cluster import GpuCluster

    cluster = GpuCluster(stack.cluster.name, stack.cluster)
    pulumi.export("controller_address", cluster.controller_address)
    pulumi.export("nodes", cluster.nodes)
    pulumi.export("node_list", cluster.node_list)
    pulumi.export("web_url", cluster.web_url)
    pulumi.export("slurm_env", cluster.slurm_env)
    pulumi.export("node_shells", cluster.node_shells)
    pulumi.export("host_facts", cluster.host_facts)
    pulumi.export("boot_command", cluster.boot_command)
    if stack.cluster.multi_host:
        # Per host: its address, the ssh command (SSH and EC2 hosts), the drift check run there.
        pulumi.export("hosts", cluster.hosts_access)
        pulumi.export("verify_command", {name: access["verify"] for name, access in cluster.hosts_config.items()})
    else:
        pulumi.export("verify_command", f"./verify.sh {pulumi.get_stack()}")
    if cluster.login_ssh is not None:
        pulumi.export("login_ssh", cluster.login_ssh)
    if cluster.cost is not None:
        pulumi.export("cost", cluster.cost)
    if cluster.registry_output is not None:
        pulumi.export("registry", cluster.registry_output)

if stack.kubernetes:
    from components.kubernetes.target import build_kubernetes

    for key, value in build_kubernetes(stack.kubernetes).items():
        pulumi.export(key, value)
