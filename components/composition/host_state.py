"""The host state: everything the cluster owns on one of its hosts, as the boot unit's bring-up
(components/host/boot_unit.py) and `verify.sh` (ops/verify.py) read it.

It spans every area (bridges and forwards, containers, slurmctld, accounting, metrics, routes,
the shared filesystem), so it is rendered here, beside the composition, from the whole
ClusterConfig; the host area's boot unit receives the rendered text.
"""

from components.common.transport import DEFAULT_LXC_PATH
from components.composition.cluster_host import ClusterHostConfig
from components.composition.config import ClusterConfig
from components.host.boot_unit import boot_paths
from components.metrics.render import exporter_guard
from components.sharedfs.shared_fs import mount_state


def host_state(
    config: ClusterConfig, host: ClusterHostConfig | None = None, efs_address: str | None = None
) -> dict[str, str]:
    """Everything the cluster owns on one of its hosts (default: its only one), as the
    bring-up and verify read it.

    Lists are space-separated: no item can hold a space (the config types forbid it).
    """
    host = host or config.cluster_hosts[0]
    view = config.for_host(host)
    cluster = config.host_identity(host)
    net = host.network
    here = config.controller_host.name == host.name
    # The accounting database's container, started before the nodes; listed only on its host,
    # so clusters without accounting keep their description.
    database_here = config.accounting and config.accounting_host.name == host.name
    accounting = {"DB_CONTAINER": config.container_name(config.accounting.name)} if database_here else {}
    state = {
        "CLUSTER": config.name,
        "CLUSTER_DIR": cluster.cluster_dir,
        "NAT_BRIDGE": net.nat_bridge.name,
        "NAT_ADDRESS": str(net.nat_bridge.address),
        "NAT_SUBNET": str(net.nat_bridge.subnet),
        "CLUSTER_BRIDGE": net.cluster_bridge.name,
        # tag,host_port,address,port[,sources] per forward (sources '+'-separated, when limited)
        "FORWARDS": " ".join(
            f"{config.forward_tag(f.host_port)},{f.host_port},{view.target_address(f.target)},{f.port}"
            + (f",{f.source_list}" if f.allowed_sources else "")
            for f in view.all_forwards
        ),
        "MUNGE_KEY_FILE": f"{cluster.cluster_dir}/munge.key",
        # slurmctld on this host (its own conf), or in a node container here
        # slurmctld runs in a container (the node image's Slurm), never on the host
        "CONTROLLER_CONF": "",
        "CONTROLLER_CONTAINER": config.controller_container if here else "",
        "IMAGE": config.container_name("image"),
        "NODE_CONTAINERS": " ".join(config.container_name(n) for n in view.node_names),
        "WEB_CONTAINER": config.container_name(view.web_app.name) if view.web_app else "",
        "BOOT_UNIT": boot_paths(cluster)["unit"],
        **accounting,
    }
    # Only where they apply, so a one-host stack's description stays as it was.
    if view.gpu.stand_in:
        # device directory,count: the stand-in GPUs live under the run directory, a tmpfs
        state["STAND_IN_GPUS"] = f"{config.host_device_dir(host)},{view.gpu.stand_in.count}"
    if view.web_app:
        # snapshot directory,interval: the cluster-status writer, a plain daemon on this host
        state["STATUS_WRITER"] = f"{cluster.status_dir},{view.web_app.status_interval_s}"
    if view.login:
        # the login node's container, started with the others (its sshd and munge are units there)
        state["LOGIN_CONTAINER"] = config.container_name(view.login.name)
    if config.metrics_enabled and here:
        # Prometheus's container, and the directory of the cluster exporter, a plain daemon here
        state["METRICS_CONTAINER"] = config.container_name(config.metrics.name)
        state["METRICS_EXPORTER"] = f"{cluster.cluster_dir}/metrics"
        # its firewall guard (components/files/lib/guards.sh): Prometheus's container only
        state["EXPORTER_GUARD"] = exporter_guard(config)
    if config.stack_registry and here:
        # the stack's registry's container (its two registries are units there)
        state["REGISTRY_CONTAINER"] = config.container_name(config.stack_registry.name)
    if host.lxc_dir != DEFAULT_LXC_PATH:
        state["LXC_PATH"] = host.lxc_dir
    if config.burst_access(host):
        # what burst nodes may open into the NAT bridge (components/files/lib/bridges.sh inbound_rules)
        state["BURST_ACCESS"] = config.burst_access(host)
    if config.multi_host or config.routes_of(host):
        # subnet,via per other host: routes to its containers, and the burst VPC's (subnet,via,burst)
        # on the controller's host, one host too (components/network/files/routes_*)
        state["ROUTES"] = " ".join(config.route_entries(host))
    # The shared filesystem (with shared_fs): its server on the serving host, the mount on each.
    state.update(mount_state(config, host, efs_address))
    return state


def render_host_state(
    config: ClusterConfig, host: ClusterHostConfig | None = None, efs_address: str | None = None
) -> str:
    lines = [f"# What gpu-cluster {config.name} owns on this host (rendered; read by boot.sh and verify.sh)\n"]
    lines += [f"{key}={value}\n" for key, value in host_state(config, host, efs_address).items()]
    return "".join(lines)
