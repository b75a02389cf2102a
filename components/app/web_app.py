"""WebApp: the GPU web app in its own CUDA container."""

from pathlib import Path

import pulumi

from components.config import ClusterIdentity, WebAppConfig
from components.lxc.cuda_container import ContainerPlatform, CudaContainer
from components.lxc.lxc_conf import ContainerSpec
from components.options import child_options
from components.transport import env_list, host_command

FILES = Path(__file__).parent / "files"

APP_SOURCE = FILES / "gpu_web_app.py"


class WebApp(pulumi.ComponentResource):
    """A small Python web app that runs a GPU job per request, in a container of its own.

    Builds:
      - `<name>-container`: a CudaContainer on the NAT bridge with `web_app.gpus` (its own, or
        explicitly shared with nodes by `web_app.share_gpus`; none: CPU fallback).
      - `<name>-service`: the app (components/app/files/gpu_web_app.py) as a systemd unit in the
        container, listening on `web_app.port`, the same value the port forward targets;
        create waits for `/healthz`.
    `GET /` runs `web_app.job_command` (a labelled CPU fallback when it cannot run) with at
    most `max_concurrent_jobs` at once; further requests get 503 instead of queueing jobs.
    """

    url: pulumi.Output[str]
    container: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        cluster: ClusterIdentity,
        app: WebAppConfig,
        platform: ContainerPlatform,
        image: pulumi.Resource,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("gpu-cluster:app:WebApp", name, None, opts)
        self.container_resource = CudaContainer(
            f"{name}-container",
            cluster,
            ContainerSpec(
                hostname=app.name,
                nat_address=app.nat_address,
                cluster_address=None,
                gpu_devices=list(app.gpus),
            ),
            platform,
            image=image,
            opts=child_options(self, opts),
        )
        self.service = host_command(
            f"{name}-service",
            create=FILES / "webapp_create.sh",
            delete=FILES / "webapp_delete.sh",
            environment={
                "CONTAINER": cluster.container_name(app.name),
                "APP_SOURCE": APP_SOURCE.read_text(),
                "APP_PORT": str(app.port),
                "APP_ADDRESS": str(app.nat_address),
                "JOB_COMMAND": env_list(app.job_command),
                "MAX_CONCURRENT_JOBS": str(app.max_concurrent_jobs),
                "JOB_TIMEOUT_S": str(app.job_timeout_s),
            },
            opts=child_options(self, opts, self.container_resource, replace_with=[self.container_resource.lxc]),
        )
        self.url = pulumi.Output.from_input(f"http://{app.nat_address}:{app.port}/")
        self.container = self.container_resource.container
        self.register_outputs({"url": self.url, "container": self.container})
