"""The project's GPU web app on Kubernetes: a Deployment and a Service.

The app port is one config value (`web_app.container_port`) and every place that names it
reads it from there: containerPort, both probes, the Service's targetPort and env PORT. So
they cannot disagree, and the manifest tests check that they do not.
"""

import pulumi
import pulumi_kubernetes as k8s

from components.common.options import child_options
from components.kubernetes.config import KubernetesConfig, WebAppConfig
from components.kubernetes.workloads import (
    await_options,
    container_security,
    gpu_limits,
    gpu_pod_scheduling,
    object_metadata,
    pod_security,
    selector_labels,
)

PORT_NAME = "http"


def _web_app(config: KubernetesConfig) -> WebAppConfig:
    if config.web_app is None:
        raise ValueError("kubernetes.web_app is not configured")
    return config.web_app


def _probe(app: WebAppConfig) -> dict:
    return {
        "httpGet": {"path": app.health_path, "port": app.container_port},
        "initialDelaySeconds": app.probes.initial_delay_seconds,
        "periodSeconds": app.probes.period_seconds,
        "timeoutSeconds": app.probes.timeout_seconds,
        "failureThreshold": app.probes.failure_threshold,
    }


def web_app_deployment_manifest(config: KubernetesConfig) -> dict:
    """apps/v1 Deployment of the web app: one GPU per pod, probes on its health endpoint."""
    app = _web_app(config)
    r = app.resources
    container = {
        "name": "web-app",
        "image": app.image,
        "ports": [{"name": PORT_NAME, "containerPort": app.container_port}],
        "env": [{"name": "PORT", "value": str(app.container_port)}],
        "resources": {
            "requests": {"cpu": r.cpu_request, "memory": r.memory_request},
            "limits": {
                "cpu": r.cpu_limit,
                "memory": r.memory_limit,
                **gpu_limits(app.gpus),
            },
        },
        "readinessProbe": _probe(app),
        "livenessProbe": _probe(app),
        "securityContext": container_security(non_root=True, read_only_root=True),
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": object_metadata(app.name, config.namespace),
        "spec": {
            "replicas": app.replicas,
            "selector": {"matchLabels": selector_labels(app.name)},
            "template": {
                "metadata": {"labels": selector_labels(app.name)},
                "spec": {
                    "containers": [container],
                    **pod_security(),
                    **gpu_pod_scheduling(config.gpu_scheduling),
                },
            },
        },
    }


def web_app_service_manifest(config: KubernetesConfig) -> dict:
    """v1 Service in front of the web app (type and port from config)."""
    app = _web_app(config)
    port = {
        "name": PORT_NAME,
        "port": app.service.port,
        "targetPort": app.container_port,
    }
    if app.service.node_port is not None:
        port["nodePort"] = app.service.node_port
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_metadata(app.name, config.namespace),
        "spec": {
            "type": app.service.type,
            "selector": selector_labels(app.name),
            "ports": [port],
        },
    }


def _load_balancer_address(status) -> str | None:
    ingress = (status.load_balancer.ingress if status and status.load_balancer else None) or []
    return (ingress[0].ip or ingress[0].hostname) if ingress else None


class KubernetesWebApp(pulumi.ComponentResource):
    """The GPU web app on Kubernetes.

    Builds:
    - `{name}-deployment`: apps/v1 Deployment, one GPU per pod, CPU/memory requests and
      limits, readiness and liveness probes on the health endpoint, env PORT.
    - `{name}-service`: v1 Service (ClusterIP, NodePort or LoadBalancer) to the app port.

    Pass the Kubernetes provider (and any namespace/operator dependency) in `opts`.
    """

    deployment_name: pulumi.Output[str]
    """Name of the Deployment."""
    service_name: pulumi.Output[str]
    """Name of the Service."""
    service_port: pulumi.Output[int]
    """Port the Service listens on."""
    node_port: pulumi.Output[int | None]
    """Node port (NodePort/LoadBalancer Services), None for ClusterIP."""
    cluster_url: pulumi.Output[str]
    """URL of the app inside the cluster (Service DNS name and port)."""
    load_balancer_address: pulumi.Output[str | None]
    """External IP or hostname of a LoadBalancer Service once assigned, else None."""

    def __init__(
        self,
        name: str,
        config: KubernetesConfig,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("gpu-cluster:kubernetes:WebApp", name, None, opts)
        app = _web_app(config)
        deployment_manifest = web_app_deployment_manifest(config)
        service_manifest = web_app_service_manifest(config)
        deployment = k8s.apps.v1.Deployment(
            f"{name}-deployment",
            metadata=deployment_manifest["metadata"],
            spec=deployment_manifest["spec"],
            opts=await_options(config, child_options(self, opts)),
        )
        service = k8s.core.v1.Service(
            f"{name}-service",
            metadata=service_manifest["metadata"],
            spec=service_manifest["spec"],
            opts=child_options(self, opts),
        )
        self.deployment_name = deployment.metadata.apply(lambda m: m.name)
        self.service_name = service.metadata.apply(lambda m: m.name)
        self.service_port = pulumi.Output.from_input(app.service.port)
        if app.service.type == "ClusterIP":
            self.node_port = pulumi.Output.from_input(None)
        else:
            self.node_port = service.spec.apply(lambda spec: spec.ports[0].node_port if spec and spec.ports else None)
        self.cluster_url = pulumi.Output.from_input(
            f"http://{app.name}.{config.namespace}.svc.cluster.local:{app.service.port}"
        )
        self.load_balancer_address = service.status.apply(_load_balancer_address)
        self.register_outputs(
            {
                "deployment_name": self.deployment_name,
                "service_name": self.service_name,
                "service_port": self.service_port,
                "node_port": self.node_port,
                "cluster_url": self.cluster_url,
                "load_balancer_address": self.load_balancer_address,
            }
        )
