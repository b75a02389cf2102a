"""The Kubernetes GPU target: one provider, then the operator, the workloads and the web app.

Order comes from the graph: the workloads' namespace and the GPU operator come first, since a
pod asking for `nvidia.com/gpu` cannot be scheduled before the operator's device plugin
advertises GPUs; the operator itself needs nothing of ours. Every resource is given the
provider built from the config's kubeconfig and context, never the ambient default provider,
so a stack cannot deploy to whatever cluster the shell happens to point at.
"""

import pulumi
import pulumi_kubernetes as k8s

from components.kubernetes.config import KubernetesConfig
from components.kubernetes.gpu_operator import GpuOperator, gpu_operator_namespace_manifest
from components.kubernetes.web_app import (
    KubernetesWebApp,
    web_app_deployment_manifest,
    web_app_service_manifest,
)
from components.kubernetes.workloads import GpuWorkloads, object_metadata, selector_labels, workload_manifests

# Prefix of the top-level resource names, and of the stack output keys.
PREFIX = "k8s"


def workloads_namespace_manifest(config: KubernetesConfig) -> dict:
    """v1 Namespace of the GPU workloads and the web app."""
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": config.namespace,
            "labels": {
                "app.kubernetes.io/managed-by": "pulumi",
                "app.kubernetes.io/part-of": "gpu-cluster",
            },
        },
    }


def _policy(name: str, namespace: str, pod_selector: dict, ingress: list[dict]) -> dict:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": object_metadata(name, namespace),
        "spec": {"podSelector": pod_selector, "policyTypes": ["Ingress"], "ingress": ingress},
    }


def network_policy_manifests(config: KubernetesConfig) -> dict[str, dict]:
    """Ingress in the namespace: denied, but for the web app's port (from anywhere: its
    Service may be exposed) and the notebook's (from the namespace; from anywhere only when
    it is opted into a NodePort). Keyed by the resource name suffix. Egress is not limited
    (jobs download data sets and models)."""
    if not config.network_policy:
        return {}
    ns = config.namespace
    policies = {"netpol-default-deny-ingress": _policy("default-deny-ingress", ns, {}, [])}
    if config.web_app is not None:
        app = config.web_app
        port = [{"protocol": "TCP", "port": app.container_port}]
        policies["netpol-web-app"] = _policy(
            f"{app.name}-ingress", ns, {"matchLabels": selector_labels(app.name)}, [{"ports": port}]
        )
    notebook = config.workloads.notebook
    if notebook is not None:
        rule: dict = {"ports": [{"protocol": "TCP", "port": notebook.container_port}]}
        if notebook.service_type != "NodePort":
            rule["from"] = [{"podSelector": {}}]
        policies["netpol-notebook"] = _policy(
            f"{notebook.name}-ingress", ns, {"matchLabels": selector_labels(notebook.name)}, [rule]
        )
    return policies


def all_manifests(config: KubernetesConfig) -> list[dict]:
    """Every Kubernetes object the target creates from plain manifests (not the Helm chart's)."""
    manifests = []
    if config.create_namespace:
        manifests.append(workloads_namespace_manifest(config))
    if config.gpu_operator is not None:
        manifests.append(gpu_operator_namespace_manifest(config.gpu_operator))
    manifests.extend(workload_manifests(config).values())
    if config.web_app is not None:
        manifests.append(web_app_deployment_manifest(config))
        manifests.append(web_app_service_manifest(config))
    manifests.extend(network_policy_manifests(config).values())
    return manifests


def build_kubernetes(config: KubernetesConfig) -> dict[str, pulumi.Input]:
    """Create the Kubernetes target's resources and return the stack outputs to export.

    The output keys are the same whatever is enabled (None where a part is not deployed), so
    scripts reading them need not know the stack's config.
    """
    provider_args = {"kubeconfig": config.kubeconfig, "context": config.context}
    provider = k8s.Provider(
        PREFIX,
        **{key: value for key, value in provider_args.items() if value is not None},
    )

    gpu_ready: list[pulumi.Resource] = []
    if config.create_namespace:
        ns_manifest = workloads_namespace_manifest(config)
        gpu_ready.append(
            k8s.core.v1.Namespace(
                f"{PREFIX}-namespace",
                metadata=ns_manifest["metadata"],
                opts=pulumi.ResourceOptions(provider=provider),
            )
        )

    operator = None
    if config.gpu_operator is not None:
        operator = GpuOperator(
            f"{PREFIX}-gpu-operator",
            config.gpu_operator,
            opts=pulumi.ResourceOptions(provider=provider),
        )
        gpu_ready.append(operator)

    # Components pass provider and depends_on on to their children (see child_options).
    gpu_opts = pulumi.ResourceOptions(provider=provider, depends_on=gpu_ready)

    # Before any workload: no pod is reachable from outside before its policy says so.
    namespace_ready = gpu_ready[:1] if config.create_namespace else []
    policies = [
        k8s.networking.v1.NetworkPolicy(
            f"{PREFIX}-{role}",
            metadata=manifest["metadata"],
            spec=manifest["spec"],
            opts=pulumi.ResourceOptions(provider=provider, depends_on=namespace_ready),
        )
        for role, manifest in network_policy_manifests(config).items()
    ]
    gpu_opts = pulumi.ResourceOptions(provider=provider, depends_on=[*gpu_ready, *policies])

    workloads = None
    if config.workloads.any_enabled():
        workloads = GpuWorkloads(f"{PREFIX}-gpu-workloads", config, opts=gpu_opts)

    web_app = None
    if config.web_app is not None:
        web_app = KubernetesWebApp(f"{PREFIX}-web-app", config, opts=gpu_opts)

    return {
        "k8s_namespace": config.namespace,
        "k8s_gpu_operator_namespace": operator.namespace if operator else None,
        "k8s_gpu_operator_release": operator.release_name if operator else None,
        "k8s_gpu_operator_chart_version": operator.chart_version if operator else None,
        "k8s_workloads": workloads.workload_names if workloads else {},
        "k8s_notebook_node_port": workloads.notebook_node_port if workloads else None,
        "k8s_web_app_deployment": web_app.deployment_name if web_app else None,
        "k8s_web_app_service": web_app.service_name if web_app else None,
        "k8s_web_app_service_port": web_app.service_port if web_app else None,
        "k8s_web_app_node_port": web_app.node_port if web_app else None,
        "k8s_web_app_cluster_url": web_app.cluster_url if web_app else None,
        "k8s_web_app_load_balancer": web_app.load_balancer_address if web_app else None,
        "k8s_network_policies": [
            manifest["metadata"]["name"] for manifest in network_policy_manifests(config).values()
        ],
    }
