"""The composition: ClusterConfig and its views, the GpuCluster and its host parts, the host state, the stack config."""
