"""WebApp: the GPU web app in its own CUDA container, and the cluster snapshot its page shows."""

import json
from pathlib import Path

import pulumi

from components.app.config import WebAppConfig
from components.common.config_types import ClusterIdentity
from components.common.options import child_options
from components.common.transport import Transport, host_command
from components.lxc.cuda_container import ContainerPlatform, CudaContainer
from components.lxc.lxc_conf import ContainerSpec

FILES = Path(__file__).parent / "files"

APP_SOURCE = FILES / "gpu_web_app.py"
# The app's other files, shipped beside it (its HTTP front imports the handlers, they the page).
APP_HANDLERS_SOURCE = FILES / "web_handlers.py"
APP_PAGE_SOURCE = FILES / "web_page.py"
STATUS_WRITER_SOURCE = FILES / "cluster_status.py"
# Where the app's container sees the snapshot directory (read-only). Not under /run: systemd
# mounts a fresh tmpfs there at boot, which would hide the bind mount.
CONTAINER_STATUS_DIR = "/var/lib/cluster-status"


def render_app_settings(app: WebAppConfig, prometheus_url: str = "") -> str:
    """The app's settings file (JSON), read by components/app/files/gpu_web_app.py;
    `prometheus_url`: the cluster's Prometheus, for the GPU allocation panel (none: no panel)."""
    settings = {
        "listen_address": str(app.nat_address),
        "port": app.port,
        "job_command": app.job_command,
        "max_concurrent_jobs": app.max_concurrent_jobs,
        "job_timeout_s": app.job_timeout_s,
        "max_connections": app.max_connections,
        "run_allowed_cidrs": [str(cidr) for cidr in app.run_allowed_cidrs],
        "server_names": app.server_names,
        "status_file": f"{CONTAINER_STATUS_DIR}/cluster.json",
        "status_interval_s": app.status_interval_s,
    }
    if prometheus_url:
        settings["prometheus_url"] = prometheus_url
    return json.dumps(settings, indent=1)


class WebApp(pulumi.ComponentResource):
    """A small Python web app with a page that runs a GPU job, in a container of its own.

    Builds:
      - `<name>-status`: on the host, a loop that writes `sinfo`/`squeue` as JSON into the
        snapshot directory every `status_interval_s`. It does not wait for Slurm (which waits
        for the controller's container): until Slurm answers, the snapshot says why.
      - `<name>-container`: a CudaContainer on the NAT bridge with `web_app.gpus` (its own, or
        explicitly shared with nodes by `web_app.share_gpus`; none: CPU fallback) and the
        snapshot directory mounted read-only.
      - `<name>-service`: the app (components/app/files/gpu_web_app.py) as a systemd unit in
        the container, listening on `nat_address:port` only (what the port forward targets);
        Slurm and munge are purged from the container; create waits for `/healthz`.
    The page at `/` runs `web_app.job_command` by a same-origin `POST /api/run` (a labelled
    CPU fallback when it cannot run), at most `max_concurrent_jobs` at once; further runs get
    503 instead of queueing.
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
        transport: Transport | None = None,
        prometheus_url: str = "",
    ):
        super().__init__("gpu-cluster:app:WebApp", name, None, opts)
        # The snapshot writer first: it makes the directory the container mounts.
        self.status = host_command(
            f"{name}-status",
            transport=transport,
            create=FILES / "webapp_status_create.sh",
            delete=FILES / "webapp_status_delete.sh",
            environment={
                "CLUSTER": cluster.name,
                "CLUSTER_DIR": cluster.cluster_dir,
                "STATUS_DIR": cluster.status_dir,
                "STATUS_INTERVAL_S": str(app.status_interval_s),
                "STATUS_WRITER_SOURCE": STATUS_WRITER_SOURCE.read_text(),
            },
            placed=True,
            opts=child_options(self, opts),
        )
        self.container_resource = CudaContainer(
            f"{name}-container",
            cluster,
            ContainerSpec(
                hostname=app.name,
                nat_address=app.nat_address,
                cluster_address=None,
                gpu_devices=list(app.gpus),
                read_only_mounts=((cluster.status_dir, CONTAINER_STATUS_DIR),),
            ),
            platform,
            image=image,
            opts=child_options(self, opts, self.status),
            transport=transport,
        )
        self.service = host_command(
            f"{name}-service",
            transport=transport,
            create=FILES / "webapp_create.sh",
            delete=FILES / "webapp_delete.sh",
            environment={
                "CONTAINER": cluster.container_name(app.name),
                "APP_SOURCE": APP_SOURCE.read_text(),
                "APP_HANDLERS_SOURCE": APP_HANDLERS_SOURCE.read_text(),
                "APP_PAGE_SOURCE": APP_PAGE_SOURCE.read_text(),
                "APP_SETTINGS": render_app_settings(app, prometheus_url),
                "APP_PORT": str(app.port),
                "APP_ADDRESS": str(app.nat_address),
            },
            opts=child_options(self, opts, self.container_resource, replace_with=[self.container_resource.lxc]),
        )
        self.url = pulumi.Output.from_input(f"http://{app.nat_address}:{app.port}/")
        self.container = self.container_resource.container
        self.register_outputs({"url": self.url, "container": self.container})
