"""SlurmNode: munge and slurmd in one node container, registered with the controller."""

from ipaddress import IPv4Address
from pathlib import Path

import pulumi

from components.common.config_types import ClusterIdentity
from components.common.options import child_options
from components.common.rendering import container_device_path
from components.common.transport import Transport, env_list, host_command
from components.lxc.node_image import JOB_FILES_REAPER_SOURCE
from components.slurm.config import HealthCheckConfig, NodeConfig

FILES = Path(__file__).parent / "files"
HEALTH_CHECK_SOURCE = FILES / "gpu_health.sh"


class SlurmNode(pulumi.ComponentResource):
    """slurmd in a node container, in configless mode.

    Builds `<name>-slurmd`: installs the cluster's munge key (munge:munge 0400) and starts
    munge, then starts slurmd with `--conf-server` pointing at the controller, and waits
    until the controller reports the node idle. The node holds no copy of slurm.conf, so
    adding or removing another node never touches this one.

    With a health check, the GPU health program (files/gpu_health.sh, slurm.conf's
    HealthCheckProgram) is installed with the node's GPU devices and the major:minor of the
    host's device nodes behind them. munged and slurmd are the last the node's OOM killer
    picks (OOMScoreAdjust=-1000), and a timer removes what ended jobs left in /dev/shm and /tmp
    (files/job_files_reaper.sh). slurmd restarts when the plugins it loads at start only
    change (`start_plugins`: process tracking, task containment, job accounting); running
    jobs keep their slurmstepd and go on. With jobs in container images, slurmd (re)starts
    after the node's `containers_setup` (components/containers/node_setup.py): it loads
    plugstack.conf's `required` Pyxis at start.
    """

    node_name: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        cluster: ClusterIdentity,
        node: NodeConfig,
        controller_address: IPv4Address,
        container: pulumi.Resource,
        gpu_devices: list[str] | None = None,
        health_check: HealthCheckConfig | None = None,
        start_plugins: str | None = None,
        cpuset: str | None = None,
        containers_setup: pulumi.Resource | None = None,
        opts: pulumi.ResourceOptions | None = None,
        transport: Transport | None = None,
    ):
        super().__init__("gpu-cluster:slurm:SlurmNode", name, None, opts)
        environment = {
            "CLUSTER": cluster.name,
            "CONTAINER": cluster.container_name(node.name),
            "NODE": node.name,
            "CLUSTER_DIR": cluster.cluster_dir,
            "MUNGE_KEY_FILE": f"{cluster.cluster_dir}/munge.key",
            "MUNGE_SOCKET": cluster.munge_socket,
            "CONF_SERVER": str(controller_address),
            "JOB_FILES_REAPER": JOB_FILES_REAPER_SOURCE.read_text(),
        }
        # Added only when used: a cluster without them keeps its inputs (and its slurmd).
        if health_check:
            environment["GPU_HEALTH_PROGRAM"] = HEALTH_CHECK_SOURCE.read_text()
            environment["GPU_HEALTH_DEVICES"] = env_list(
                f"{path} {container_device_path(path)}" for path in gpu_devices or []
            )
        if start_plugins:
            environment["SLURMD_START_PLUGINS"] = start_plugins
        if cpuset:
            # The container's (SLOT,COUNT): a new one writes slurmd's CPU topology again.
            environment["CPUSET"] = cpuset
        self.slurmd = host_command(
            f"{name}-slurmd",
            transport=transport,
            create=FILES / "slurmd_create.sh",
            delete=FILES / "slurmd_delete.sh",
            environment=environment,
            # Lives in the container: a new container needs munge and slurmd set up again.
            opts=child_options(self, opts, *filter(None, [containers_setup]), replace_with=[container]),
        )
        self.node_name = pulumi.Output.from_input(node.name)
        self.register_outputs({"node_name": self.node_name})
