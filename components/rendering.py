"""What the files rendered for the host and the containers share, whatever area renders them."""

# First line of every config file the program writes (slurm.conf, gres.conf, LXC config).
HEADER = "# Managed by the gpu-cluster Pulumi program; local edits are overwritten.\n"


def container_device_path(host_path: str) -> str:
    """A GPU device appears in the container as /dev/<basename of the host node>."""
    return "/dev/" + host_path.rsplit("/", 1)[-1]
