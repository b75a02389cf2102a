"""Components of the gpu-cluster Pulumi program: one module per thing it models."""
