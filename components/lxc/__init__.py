"""LXC: the node image, CUDA containers and their rendered config."""
