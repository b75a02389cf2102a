"""The stack's own registry (containers.registry): Debian's docker-registry in a container of
its own, for a site without a registry; people pull from it, read-only, and only the operator
pushes."""

from dataclasses import dataclass
from pathlib import Path

import pulumi

from components.common.config_types import KEEP_DIR, ClusterIdentity
from components.common.options import child_options
from components.common.transport import Transport, env_list, host_command
from components.containers.config import StackRegistryConfig
from components.lxc.lxc_conf import render_service_lxc_config
from components.network.config import NetworkConfig

FILES = Path(__file__).parent / "files"
# The registry container's packages, installed by LXC's Debian template.
REGISTRY_PACKAGES = ["docker-registry", "apache2-utils", "openssl", "ca-certificates", "curl", "iproute2"]
# Where the host's data directory (images, TLS, the push account) is bound in the container.
DATA_IN_CONTAINER = "/var/lib/gpucluster-registry"


@dataclass(frozen=True)
class RegistryPaths:
    """The registry's data directory on the host, and where destroy keeps it."""

    data_dir: str
    """Root's only (0700): no one on the host reaches the store below it, whose owners are the
    container's (a privileged container's ids are the host's)."""
    store: str
    """Bound into the container: the images, the TLS files, the push account."""
    kept_dir: str

    @classmethod
    def of(cls, cluster: ClusterIdentity) -> "RegistryPaths":
        data_dir = f"{cluster.cluster_dir}/registry"
        return cls(data_dir=data_dir, store=f"{data_dir}/store", kept_dir=f"{KEEP_DIR}/{cluster.name}/registry")


def registry_fingerprint(release: str, container: str) -> list[str]:
    """What the container is built from, and its name: a change replaces it, the old one gone
    first (it holds the address), its data directory kept."""
    return [release, *REGISTRY_PACKAGES, container]


class StackRegistry(pulumi.ComponentResource):
    """A registry for the cluster's nodes, on the NAT bridge of the controller's host.

    Builds:
      - `<name>-data`: on the host, the registry's data directory (bound into the container, so
        images outlive it): the images, the CA and the registry's TLS key (0600, made once in
        the container: the CA's key never leaves the host), the push account (htpasswd). A
        directory kept by an earlier destroy is taken up. Its delete moves it to the kept
        directory (`keep_images`), or removes it.
      - `<name>-lxc`: the container `<cluster>-<registry.name>`, made by LXC's Debian template
        with docker-registry, at `nat_address`; two registries on one store: `port` anonymous
        and read-only (every pull), `push_port` with the push account only. Prints the CA's
        certificate, which every node's setup adds to its trusted CAs.
      - `<name>-account`: the push account (htpasswd, bcrypt; the password comes on stdin):
        a command of its own, so that the CA, the container command's output, is no secret.
    """

    ca_cert: pulumi.Output[str]
    pull_address: pulumi.Output[str]
    push_address: pulumi.Output[str]
    summary: pulumi.Output[dict]
    """The stack's `registry` output: where people pull, where the operator pushes, the CA."""

    def __init__(
        self,
        name: str,
        cluster: ClusterIdentity,
        registry: StackRegistryConfig,
        network: NetworkConfig,
        release: str,
        push_password: pulumi.Input[str],
        opts: pulumi.ResourceOptions | None = None,
        transport: Transport | None = None,
    ):
        super().__init__("gpu-cluster:containers:StackRegistry", name, None, opts)
        paths = RegistryPaths.of(cluster)
        container = cluster.container_name(registry.name)
        self.data = host_command(
            f"{name}-data",
            transport=transport,
            create=FILES / "registry_data_create.sh",
            delete=FILES / "registry_data_delete.sh",
            environment={
                "DATA_DIR": paths.data_dir,
                "STORE": paths.store,
                "KEPT_DIR": paths.kept_dir,
                "KEEP_IMAGES": "yes" if registry.keep_images else "no",
            },
            opts=child_options(self, opts),
        )
        self.lxc = host_command(
            f"{name}-lxc",
            transport=transport,
            create=FILES / "registry_create.sh",
            delete=FILES / "registry_delete.sh",
            environment={
                "CLUSTER": cluster.name,
                "CLUSTER_DIR": cluster.cluster_dir,
                "CONTAINER": container,
                "NODE_HOSTNAME": registry.name,
                "LXC_CONFIG": render_service_lxc_config(
                    registry.name, registry.nat_address, network, {paths.store: DATA_IN_CONTAINER}, container
                ),
                "NAT_ADDRESS": str(registry.nat_address),
                "RELEASE": release,
                "PACKAGES": env_list(REGISTRY_PACKAGES),
                "STORE": paths.store,
                "DATA_IN_CONTAINER": DATA_IN_CONTAINER,
                "PORT": str(registry.port),
                "PUSH_PORT": str(registry.push_port),
            },
            triggers=registry_fingerprint(release, container),
            # Fixed name and address: the old container goes before a new one is made.
            opts=child_options(self, opts, self.data, delete_before_replace=True),
        )
        # Apart from the container's command: its output (the CA) stays out of the secret's reach.
        self.account = host_command(
            f"{name}-account",
            transport=transport,
            create=FILES / "registry_account_create.sh",
            environment={
                "CONTAINER": container,
                "DATA_IN_CONTAINER": DATA_IN_CONTAINER,
                "PUSH_USERNAME": registry.push_username,
            },
            stdin=pulumi.Output.secret(push_password),
            opts=child_options(self, opts, self.lxc),
        )
        # The PEM as a file has it: the engine trims the command's final newline.
        self.ca_cert = self.lxc.stdout.apply(lambda pem: f"{pem}\n" if pem else pem)
        self.pull_address = pulumi.Output.from_input(f"{registry.nat_address}:{registry.port}")
        self.push_address = pulumi.Output.from_input(f"{registry.nat_address}:{registry.push_port}")
        self.summary = pulumi.Output.all(pull=self.pull_address, push=self.push_address, ca_cert=self.ca_cert)
        self.register_outputs(
            {"ca_cert": self.ca_cert, "pull_address": self.pull_address, "push_address": self.push_address}
        )
