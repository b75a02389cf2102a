"""What the files rendered for the host and the containers share, whatever area renders them."""

# First line of every config file the program writes (slurm.conf, gres.conf, LXC config).
HEADER = "# Managed by the gpu-cluster Pulumi program; local edits are overwritten.\n"


def container_device_path(host_path: str) -> str:
    """Where a host device node appears in a container: a device under /dev keeps its path
    (/dev/nvidia0; /dev/nvidia-caps/nvidia-cap1, whose directory MIG needs); a stand-in, made
    in the cluster's private device directory, appears as /dev/<basename>."""
    if host_path.startswith("/dev/"):
        return host_path
    return "/dev/" + host_path.rsplit("/", 1)[-1]
