"""Typed config of the Kubernetes GPU target: the `gpu-cluster:kubernetes` stack key.

What a section's presence means: `gpu_operator`, each entry of `workloads` and `web_app` are
optional; a section that is present is deployed, one that is absent is not. So a stack file
says what it deploys by what it contains, and a typo in a section name is an unknown-key error
rather than a silently skipped workload.

Field rules (formats, ranges, whole GPUs, pinned images) live on the types (fields.py); the
models of each part beside it (operator_config.py: scheduling and the GPU operator;
workload_config.py: the workloads and the web app). Rules that
relate several fields are small named functions listed in each model's `RULES`; the model's
validator runs all of them and raises one error that lists every problem, each naming the
field and what it accepts.
"""

from collections.abc import Iterator
from typing import ClassVar

from pydantic import Field

from components.common.config_types import Port, SafePath, StrictModel
from components.kubernetes.fields import GpuCount, ImageRef, K8sName, Rule, RuledModel
from components.kubernetes.operator_config import GpuOperatorConfig, GpuScheduling, Toleration
from components.kubernetes.workload_config import (
    ContainerResources,
    GpuWorkloadsConfig,
    NotebookPod,
    ProbeConfig,
    WebAppService,
)

# --- the project's GPU web app (its parts in workload_config.py) -------------------------------
# Defined here, where the schema has always found it (stacks/schema.json names it by module).


class WebAppConfig(StrictModel):
    """The project's GPU web app as a Deployment + Service, one GPU per pod."""

    name: K8sName = Field("gpu-web-app", description="Deployment and Service name")
    image: ImageRef = Field(description="the app's image, pinned (tag or digest)")
    replicas: int = Field(1, ge=1, le=64, description="number of app pods, one GPU each")
    container_port: Port = Field(
        8080,
        description="THE app port: containerPort, probes, Service targetPort and env PORT",
    )
    gpus: GpuCount = 1
    health_path: str = Field(
        "/healthz",
        pattern=r"^/[A-Za-z0-9._~/-]*$",
        description="HTTP path of the health check",
    )
    resources: ContainerResources = Field(
        default_factory=ContainerResources, description="CPU/memory requests and limits"
    )
    service: WebAppService = Field(default_factory=WebAppService, description="the Service")
    probes: ProbeConfig = Field(default_factory=ProbeConfig, description="probe timing")


# --- the whole section -----------------------------------------------------------------------


def _rule_deploys_something(k: "KubernetesConfig") -> Iterator[str]:
    """A Kubernetes section that deploys nothing is almost surely a forgotten key."""
    if k.gpu_operator is None and not k.workloads.any_enabled() and k.web_app is None:
        yield (
            "deploys nothing; add gpu_operator, a workload under workloads "
            "(nvidia_smi, device_query, notebook, mnist) or web_app, or remove the section"
        )


def _rule_operator_namespace_apart(k: "KubernetesConfig") -> Iterator[str]:
    """The operator's namespace is privileged and owned by the operator: keep workloads out."""
    if k.gpu_operator is not None and k.gpu_operator.namespace == k.namespace:
        yield (
            f"gpu_operator.namespace: {k.gpu_operator.namespace!r} is also namespace; the "
            "operator's namespace is privileged, so give the workloads another namespace"
        )


def object_names(k: "KubernetesConfig") -> list[tuple[str, str]]:
    """(field, object name) of every workload and the web app, in config order."""
    named = [
        ("workloads.nvidia_smi", k.workloads.nvidia_smi),
        ("workloads.device_query", k.workloads.device_query),
        ("workloads.notebook", k.workloads.notebook),
        ("workloads.mnist", k.workloads.mnist),
        ("web_app", k.web_app),
    ]
    return [(field, item.name) for field, item in named if item is not None]


def _rule_unique_object_names(k: "KubernetesConfig") -> Iterator[str]:
    """Names are also pod labels and Service selectors: two alike would select each other's pods."""
    seen: dict[str, str] = {}
    for field, name in object_names(k):
        if name in seen:
            yield (
                f"{field}.name: {name!r} is also {seen[name]}.name; every workload and the web app need distinct names"
            )
        else:
            seen[name] = field


def _rule_unique_node_ports(k: "KubernetesConfig") -> Iterator[str]:
    """A nodePort is cluster-wide: two Services cannot claim the same one."""
    notebook = k.workloads.notebook
    app = k.web_app
    if notebook and app and notebook.node_port and notebook.node_port == app.service.node_port:
        yield (
            f"web_app.service.node_port: {app.service.node_port} is also "
            "workloads.notebook.node_port; pick distinct ports in 30000-32767"
        )


class KubernetesConfig(RuledModel):
    """The `gpu-cluster:kubernetes` section: cluster access and what to deploy on it."""

    RULES: ClassVar[tuple[Rule, ...]] = (
        _rule_deploys_something,
        _rule_operator_namespace_apart,
        _rule_unique_object_names,
        _rule_unique_node_ports,
    )

    kubeconfig: SafePath | None = Field(None, description="kubeconfig file; omit for $KUBECONFIG or ~/.kube/config")
    context: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9._:/@+-]+$",
        max_length=253,
        description="kubeconfig context to use; omit for the current context",
    )
    namespace: K8sName = Field("gpu-workloads", description="namespace of the GPU workloads and the web app")
    create_namespace: bool = Field(
        True,
        description="create that namespace (false: it exists and is managed elsewhere)",
    )
    gpu_scheduling: GpuScheduling = Field(
        default_factory=GpuScheduling,
        description="node selector and tolerations given to every pod that requests a GPU",
    )
    gpu_operator: GpuOperatorConfig | None = Field(
        None,
        description="install NVIDIA's gpu-operator; omit where GPUs are already set up",
    )
    workloads: GpuWorkloadsConfig = Field(
        default_factory=GpuWorkloadsConfig,
        description="the seeds' GPU workloads to run",
    )
    web_app: WebAppConfig | None = Field(None, description="the project's GPU web app")
    await_timeout_seconds: int | None = Field(
        None,
        ge=30,
        le=3600,
        description="seconds `pulumi up` waits for each workload and the web app to be ready (a Job: "
        "complete) before it fails with what the cluster says (e.g. a pod no node can schedule); "
        "omit for the provider's 10 minutes",
    )
    network_policy: bool = Field(
        True,
        description="NetworkPolicies in the namespace: deny all ingress but the web app's port "
        "and the notebook's (from the namespace, or from anywhere when it has a NodePort)",
    )


def all_rules() -> dict[str, Rule]:
    """Every cross-field rule of this module by name, so a test can prove each is tested."""
    models = (
        Toleration,
        GpuOperatorConfig,
        ContainerResources,
        WebAppService,
        NotebookPod,
        KubernetesConfig,
    )
    return {rule.__name__: rule for model in models for rule in model.RULES}
