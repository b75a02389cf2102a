"""Host networking: the cluster's bridges and port forwards."""
