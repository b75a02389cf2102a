"""The cluster's shared filesystem."""
