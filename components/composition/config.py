"""Typed config of the GPU Slurm cluster, read from the stack's `gpu-cluster:cluster` key.

The composition: each area's models live beside its components (components/<area>/config.py)
and its cross-field rules beside them (components/<area>/rules.py); this module composes the
models into the cluster (ClusterConfig; one host of it: cluster_host.py; what it means for the
graph, its derived views: cluster_views.py) and registers the rules in CLUSTER_RULES, all run
together so one `pulumi up` reports every problem at once,
each naming the field and what it accepts. Only the host layout rule, which every other rule
relies on, lives here. The areas never import this module: components/composition/cluster.py hands each
component the slice it models.
"""

import functools
from collections.abc import Iterator
from ipaddress import IPv4Address

from pydantic import Field, model_validator

from components.app.config import WebAppConfig
from components.app.rules import rule_web_app_gpus
from components.aws.config import AwsConfig
from components.aws.rules import rule_aws
from components.burst.config import BurstConfig
from components.burst.rules import rule_burst
from components.common.config_types import StrictModel, duplicates
from components.composition.cluster_host import ClusterHostConfig
from components.composition.cluster_views import ClusterViews
from components.composition.config_rules_beside_errors import UNDERIVED, rebuilding, valid_as
from components.containers.config import ContainersConfig
from components.containers.rules import rule_containers, rule_registry_name
from components.host.config import HostConfig, UserConfig
from components.host.rules import rule_driver_files, rule_host_paths, rule_hosts, rule_users
from components.lxc.config import STAND_IN_MAX, GpuConfig, ImageConfig, device_dir_of, stand_in_devices
from components.lxc.rules import (
    rule_device_paths,
    rule_gpu_devices,
    rule_gpu_shards,
    rule_gpus_match_devices,
    rule_stand_in_gpus,
    rule_unique_node_names,
)
from components.metrics.config import MetricsConfig, rule_metrics_ports
from components.network.config import NetworkConfig, PortForwardConfig
from components.network.rules import (
    rule_bridges_distinct,
    rule_cluster_addresses_in_subnet,
    rule_forward_ports,
    rule_forwards,
    rule_nat_addresses_in_subnet,
    rule_unique_addresses,
)
from components.sharedfs.config import EfsShare, ServedNfs, SharedFsConfig, rule_shared_fs, served_address
from components.slurm.config import AccountingConfig, LoginConfig, NodeConfig, SlurmConfig
from components.slurm.rules import (
    rule_accounting,
    rule_controller_node,
    rule_login,
    rule_names_slurm_and_lxc_can_use,
    rule_partitions,
)


class ClusterConfig(ClusterViews, StrictModel):
    """The GPU Slurm cluster: on one host (`host`, `network`, `gpu`) or on several (`hosts`)."""

    name: str = Field(
        pattern=r"^[a-z][a-z0-9]{0,9}$",
        description="cluster name: 1-10 lower-case letters/digits, prefix of everything it owns",
    )
    host: HostConfig | None = Field(None, description="the one local host (without `hosts`)")
    network: NetworkConfig | None = Field(None, description="the one local host's bridges (without `hosts`)")
    gpu: GpuConfig = GpuConfig()
    hosts: list[ClusterHostConfig] | None = Field(
        None,
        min_length=1,
        max_length=64,
        description="several hosts, each with its own bridges, GPUs and directories; replaces host/network/gpu",
    )
    image: ImageConfig = ImageConfig()
    nodes: list[NodeConfig] = Field(min_length=1, max_length=256)
    slurm: SlurmConfig = SlurmConfig()
    web_app: WebAppConfig | None = None
    login: LoginConfig | None = Field(
        None,
        description="a login node: users[] log in over SSH with their ssh_keys through a host port forward and "
        "submit jobs from shared_dir; none: no login node",
    )
    forwards: list[PortForwardConfig] = Field([], description="extra host port forwards")
    users: list[UserConfig] = Field(
        [], description="people using the cluster: created on the host and in every container"
    )
    accounting: AccountingConfig | None = Field(
        None, description="job accounting (slurmdbd on MariaDB), accounts and GPU limits; none: no accounting"
    )
    metrics: MetricsConfig | None = Field(
        None,
        description="Prometheus, exporters and alert rules in a container on the controller's host; none: no metrics",
    )
    aws: AwsConfig | None = Field(None, description="where the EC2 hosts (hosts[].connection.kind: ec2) are made")
    burst: BurstConfig | None = Field(
        None, description="partitions of EC2 instances Slurm starts on demand and stops when idle; none: no burst"
    )
    containers: ContainersConfig | None = Field(
        None,
        description="jobs in container images (srun --container-image: Pyxis and Enroot, built into the node "
        "image), the registries' CAs and accounts, each person's image cache on the node; on by default "
        "(its defaults) where it can work: every cluster without burst partitions; `enabled: false` or none: "
        "no containers",
    )
    shared_fs: SharedFsConfig | None = Field(
        None,
        description="one NFS export every host mounts at its shared_dir (with `hosts`, or one host with `burst`: "
        "the host and its burst nodes): an existing one (kind: nfs) or one the program serves from a host "
        "(kind: served); none: shared_dir is per host",
    )

    @model_validator(mode="before")
    @classmethod
    def _containers_by_default(cls, data):
        """Jobs in container images are on unless the stack says otherwise, except beside burst
        partitions, whose nodes cannot run them (rule_containers)."""
        if isinstance(data, dict) and "containers" not in data and data.get("burst") is None:
            data = {**data, "containers": {}}
        return data

    @model_validator(mode="before")
    @classmethod
    def _stand_in_devices(cls, data):
        """With gpu.stand_in, the GPU devices are the stand-ins (rule_stand_in_gpus refuses others),
        in the cluster's device directory under the host's run directory."""
        if not isinstance(data, dict) or not (isinstance(data.get("name"), str) or rebuilding()):
            return data

        def filled(gpu, run_dir):
            stand_in = gpu.get("stand_in") if isinstance(gpu, dict) else None
            count = stand_in.get("count") if isinstance(stand_in, dict) else None
            # Out of range, the field check names it; the list is built only for a count in range.
            valid = (
                type(count) is int
                and 1 <= count <= STAND_IN_MAX
                and isinstance(run_dir, str)
                and isinstance(data.get("name"), str)
            )
            if valid and rebuilding():  # rebuilt around invalid fields: derived from valid ones only
                valid = valid_as(ClusterConfig, "name", data["name"]) and valid_as(
                    ClusterHostConfig, "run_dir", run_dir
                )
            if not valid:
                underived = {"devices": UNDERIVED, "control_devices": UNDERIVED}
                return {**underived, **gpu} if rebuilding() and stand_in is not None else gpu
            devices, control_devices = stand_in_devices(device_dir_of(run_dir, data["name"]), count)
            return {"devices": devices, "control_devices": control_devices, **gpu}

        if "gpu" in data:
            data = {**data, "gpu": filled(data["gpu"], "/run")}
        if isinstance(data.get("hosts"), list):
            data = {
                **data,
                "hosts": [
                    {**host, "gpu": filled(host["gpu"], host.get("run_dir", "/run"))}
                    if isinstance(host, dict) and "gpu" in host
                    else host
                    for host in data["hosts"]
                ],
            }
        return data

    @model_validator(mode="after")
    def _check_rules(self) -> "ClusterConfig":
        problems = self.rule_problems(lambda rule: list(rule()))
        if problems:
            raise ValueError("\n".join(problems))
        return self

    def rule_problems(self, run) -> list[str]:
        """Every cross-field rule's messages; `run(check)` gives one rule's (None: not checked,
        components/composition/config_rules_beside_errors.py). The rules read the host layout it checks first."""
        layout = run(lambda: rule_host_layout(self))
        if layout is None or layout:  # not checked, or wrong: the other rules need it right
            return layout or []
        rules = CLUSTER_RULES if self.hosts is None else MULTI_HOST_RULES
        return [problem for rule in rules for problem in run(functools.partial(rule, self)) or []]


# ---- the rule every other rule relies on, and the registry of all ----


def rule_host_layout(c: ClusterConfig) -> Iterator[str]:
    """Either one host (host + network [+ gpu]) or `hosts`, and every name given resolves."""
    if c.hosts is None:
        if c.host is None:
            yield "host: required (or list several hosts under `hosts`)"
        if c.network is None:
            yield "network: required (or list several hosts under `hosts`)"
        for field, value in _host_references(c):
            yield f"{field}: {value!r} names a host, but this stack has no `hosts` list"
        return
    for field, per_host in (("host", "state_dir, shared_dir"), ("network", "network"), ("gpu", "gpu")):
        if field in c.model_fields_set:
            yield f"{field}: not allowed with `hosts`; set it per host (hosts[].{per_host})"
    names = [h.name for h in c.hosts]
    for name in duplicates(names):
        yield f"hosts[].name: {name!r} is used more than once"
    for field, value in _host_references(c):
        if value not in names:
            yield f"{field}: {value!r} is not one of hosts[].name {names}"
    if len(c.hosts) > 1:
        for i, node in enumerate(c.nodes):
            if node.host is None:
                yield f"nodes[{i}].host: required with several hosts (one of {names})"
        if c.web_app and c.web_app.host is None:
            yield f"web_app.host: required with several hosts (one of {names})"
        if c.login and c.login.host is None:
            yield f"login.host: required with several hosts (one of {names})"


def _host_references(c: ClusterConfig) -> Iterator[tuple[str, str]]:
    for i, node in enumerate(c.nodes):
        if node.host is not None:
            yield f"nodes[{i}].host", node.host
    if c.web_app and c.web_app.host is not None:
        yield "web_app.host", c.web_app.host
    if c.login and c.login.host is not None:
        yield "login.host", c.login.host
    if c.slurm.controller.host is not None:
        yield "slurm.controller.host", c.slurm.controller.host
    if c.accounting and c.accounting.host is not None:
        yield "accounting.host", c.accounting.host


# Spans burst and the shared filesystem: neither area owns both facts.
def rule_burst_shared_fs(c):
    """Burst nodes mount the shared filesystem at shared_dir themselves, over the VPN: its
    server must be in burst.on_premises_cidrs. EFS lives in the EC2 site's VPC, which the
    burst VPC does not reach: refused beside a burst partition."""
    burst, fs = c.burst, c.shared_fs
    if burst is None or fs is None:
        return
    if isinstance(fs, EfsShare):
        yield (
            "burst: shared_fs kind efs is in the EC2 site's VPC, which burst nodes do not reach; their jobs would "
            "find no shared_dir: use kind served or nfs, or no burst"
        )
        return
    if isinstance(fs, ServedNfs):
        server, field = served_address(c), "the shared_fs server's address"
    else:
        try:
            server, field = IPv4Address(fs.server), "shared_fs.server"
        except ValueError:
            return  # a DNS name: resolved on the node, not checked here
    if server is not None and not any(server in net for net in burst.on_premises_cidrs):
        yield (
            f"burst.on_premises_cidrs: {field} {server} is in none of them; burst nodes mount shared_dir from it "
            "over the VPN: add its network"
        )


CLUSTER_RULES = (
    rule_aws,
    rule_burst,
    rule_names_slurm_and_lxc_can_use,
    rule_forward_ports,
    rule_host_paths,
    rule_driver_files,
    rule_device_paths,
    rule_unique_node_names,
    rule_bridges_distinct,
    rule_nat_addresses_in_subnet,
    rule_cluster_addresses_in_subnet,
    rule_unique_addresses,
    rule_gpu_devices,
    rule_stand_in_gpus,
    rule_gpus_match_devices,
    rule_gpu_shards,
    rule_web_app_gpus,
    rule_controller_node,
    rule_partitions,
    rule_forwards,
    rule_users,
    rule_accounting,
    rule_login,
    rule_shared_fs,
    rule_metrics_ports,
    rule_burst_shared_fs,
    rule_containers,
    rule_registry_name,
)


MULTI_HOST_RULES = (rule_hosts, *CLUSTER_RULES)
