"""One host of the cluster as the composition sees it: how it is reached (host/ and aws/
connections), its directories, bridges (network/) and GPUs (lxc/). A one-host stack's single
host is built from its `host`, `network` and `gpu` (ClusterConfig.cluster_hosts)."""

from pydantic import Field

from components.aws.config import Ec2Connection
from components.common.config_types import Address, Hostname, SafePath, StrictBool, StrictModel
from components.host.config import GpuHourPrice, LocalConnection, SshConnection
from components.lxc.config import GpuConfig
from components.network.config import NetworkConfig

# The name of the one host of a stack without `hosts`.
LOCAL_HOST = "local"


class ClusterHostConfig(StrictModel):
    """One GPU host of a multi-host cluster: how it is reached and what it carries."""

    name: Hostname = Field(description="host name: in resource names and nodes[].host")
    connection: LocalConnection | SshConnection | Ec2Connection = Field(
        LocalConnection(),
        discriminator="kind",
        description="{kind: local} (default), {kind: ssh, ...}, or {kind: ec2, ...} (an instance the program makes)",
    )
    address: Address | None = Field(
        None, description="address the other hosts reach this host at: their route to its container subnets"
    )
    hostname: Hostname | None = Field(
        None, description="the machine's short hostname (`hostname -s`): needed where slurmctld runs on the host"
    )
    retired: StrictBool = Field(
        False,
        description="the host is gone for good (SSH hosts only): first set this alone, and `pulumi up` "
        "runs nothing on it but marks its commands to be dropped from the state without running; "
        "then remove the host and its nodes",
    )
    state_dir: SafePath = Field("/var/lib/gpucluster", description="per-cluster state on this host")
    run_dir: SafePath = Field("/run", description="runtime directory (sockets, pid files) on this host")
    lxc_dir: SafePath = Field("/var/lib/lxc", description="LXC path (lxc-* -P) of this host's containers")
    shared_dir: SafePath = Field(description="directory bind-mounted into this host's nodes (per host)")
    install_packages: StrictBool = Field(True, description="install the Debian packages the host needs (apt-get)")
    gpu_hour_price: GpuHourPrice = 0.0
    network: NetworkConfig
    gpu: GpuConfig = GpuConfig()

    @property
    def is_ssh(self) -> bool:
        """Reached over SSH: a configured machine, or an EC2 instance of the stack."""
        return isinstance(self.connection, (SshConnection, Ec2Connection))

    @property
    def is_ec2(self) -> bool:
        return isinstance(self.connection, Ec2Connection)
