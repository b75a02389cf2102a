"""EC2 GPU instances as cluster hosts (pulumi-aws)."""
