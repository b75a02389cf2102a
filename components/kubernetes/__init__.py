"""The Kubernetes target: GPU operator, workloads and the web app as a Deployment."""
