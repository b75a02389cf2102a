"""Typed config of the Kubernetes GPU target: the `gpu-cluster:kubernetes` stack key.

What a section's presence means: `gpu_operator`, each entry of `workloads` and `web_app` are
optional; a section that is present is deployed, one that is absent is not. So a stack file
says what it deploys by what it contains, and a typo in a section name is an unknown-key error
rather than a silently skipped workload.

Field rules (formats, ranges, whole GPUs, pinned images) live on the types below. Rules that
relate several fields are small named functions listed in each model's `RULES`; the model's
validator runs all of them and raises one error that lists every problem, each naming the
field and what it accepts.
"""

import re
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    StringConstraints,
    model_validator,
)

from components.config_types import Port, SafePath, StrictModel

Rule = Callable[[Any], Iterator[str]]


def run_rules(model: Any, rules: tuple[Rule, ...]) -> None:
    """Run every rule and raise one ValueError listing all the problems they found.

    One problem per line, each starting with the field it is about (relative to the model),
    so the stack-config loader can prefix the model's own path to every line.
    """
    problems = [problem for rule in rules for problem in rule(model)]
    if problems:
        raise ValueError("\n".join(problems))


class RuledModel(StrictModel):
    """A StrictModel whose cross-field checks are the named rule functions in `RULES`."""

    RULES: ClassVar[tuple[Rule, ...]] = ()

    @model_validator(mode="after")
    def _check_rules(self):
        run_rules(self, self.RULES)
        return self


# --- field types -------------------------------------------------------------------------

# RFC 1123 label: valid for namespaces, Services (also an RFC 1035 label, since it starts
# with a letter), Deployments, Jobs, Pods, Helm release names and container names.
K8sName = Annotated[
    str,
    StringConstraints(pattern=r"^[a-z]([-a-z0-9]*[a-z0-9])?$", max_length=63),
    Field(description="Kubernetes object name: a-z, 0-9 and '-', starting with a letter, <= 63"),
]

# Label key: optional DNS-subdomain prefix and '/', then a name of at most 63 characters.
LabelKey = Annotated[
    str,
    StringConstraints(
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
        r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$",
        max_length=317,
    ),
    Field(description="label key such as 'nvidia.com/gpu.present' or 'sku'"),
]

LabelValue = Annotated[
    str,
    StringConstraints(pattern=r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$"),
    Field(description="label value: empty, or <= 63 of A-Z a-z 0-9 - _ . (alphanumeric ends)"),
]


def _check_pinned_image(value: str) -> str:
    # A moving tag makes two applies of the same stack run different software, and a
    # preview cannot show the change. Only a version tag or a digest says what runs.
    if "@sha256:" in value:
        return value
    last = value.rsplit("/", 1)[-1]
    if ":" not in last:
        raise ValueError(
            f"image {value!r} has no tag: pin a version tag "
            "(e.g. nvidia/cuda:12.4.1-base-ubuntu22.04) or a @sha256: digest"
        )
    if last.rsplit(":", 1)[1] == "latest":
        raise ValueError(f"image {value!r} uses the moving tag 'latest': pin a version tag or a @sha256: digest")
    return value


ImageRef = Annotated[
    str,
    StringConstraints(pattern=r"^[a-z0-9][A-Za-z0-9._/:@-]*$", max_length=255),
    AfterValidator(_check_pinned_image),
    Field(description="container image with a pinned tag or @sha256 digest (not ':latest')"),
]


def _whole_gpus(value: Any) -> Any:
    # nvidia.com/gpu is an extended resource: Kubernetes only accepts whole numbers for it,
    # and a GPU is never shared between containers this way. Refuse 0.5 here, by name,
    # rather than letting the API server reject the Pod at apply time. ValueError, not
    # TypeError: pydantic reports only the former as a validation error with a field path.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(
            f"nvidia.com/gpu takes whole GPUs only: {value!r} is not an integer; "
            "use 1, 2, ... (a GPU cannot be split between containers)"
        )
    return value


GpuCount = Annotated[
    int,
    BeforeValidator(_whole_gpus),
    Field(
        ge=1,
        le=16,
        description="whole GPUs requested as the nvidia.com/gpu limit, 1-16",
    ),
]

CpuQuantity = Annotated[
    str,
    StringConstraints(pattern=r"^[0-9]+(\.[0-9]+)?m?$"),
    Field(description="CPU quantity: cores ('2', '0.5') or millicores ('500m')"),
]

MemoryQuantity = Annotated[
    str,
    StringConstraints(pattern=r"^[0-9]+(\.[0-9]+)?(k|M|G|T|Ki|Mi|Gi|Ti)?$"),
    Field(description="memory quantity such as '512Mi', '4Gi' or '1G'"),
]

NodePort = Annotated[
    int,
    Field(
        ge=30000,
        le=32767,
        description="Service nodePort, in the default range 30000-32767",
    ),
]

ChartVersion = Annotated[
    str,
    StringConstraints(pattern=r"^v?[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$"),
    Field(description="exact Helm chart version such as 'v25.3.0' (no ranges, no 'latest')"),
]

_QUANTITY_SUFFIX = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
}


def quantity_value(quantity: str) -> Decimal:
    """The number a CPU or memory quantity stands for ('500m' -> 0.5, '1Ki' -> 1024)."""
    match = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)([A-Za-z]*)", quantity)
    if match is None or match[2] not in _QUANTITY_SUFFIX:
        raise ValueError(f"{quantity!r} is not a CPU or memory quantity")
    return Decimal(match[1]) * _QUANTITY_SUFFIX[match[2]]


# --- scheduling -----------------------------------------------------------------------------


def _rule_exists_has_no_value(t: "Toleration") -> Iterator[str]:
    """The API server rejects a value with operator Exists."""
    if t.operator == "Exists" and t.value:
        yield (
            f"value: must be empty when operator is 'Exists' (got value {t.value!r}); "
            "remove value or use operator: Equal"
        )


def _rule_empty_key_needs_exists(t: "Toleration") -> Iterator[str]:
    """An empty key tolerates every taint, which the API allows only with Exists."""
    if t.key is None and t.operator != "Exists":
        yield "key: required when operator is 'Equal'; set key, or use operator: Exists"


def _rule_seconds_need_no_execute(t: "Toleration") -> Iterator[str]:
    """tolerationSeconds only has a meaning (and is only accepted) for NoExecute taints."""
    if t.toleration_seconds is not None and t.effect != "NoExecute":
        yield (
            f"toleration_seconds: only allowed with effect 'NoExecute' (effect is {t.effect!r}); "
            "remove toleration_seconds or set effect: NoExecute"
        )


class Toleration(RuledModel):
    """One pod toleration, as in the Kubernetes API (snake_case keys here)."""

    RULES: ClassVar[tuple[Rule, ...]] = (
        _rule_exists_has_no_value,
        _rule_empty_key_needs_exists,
        _rule_seconds_need_no_execute,
    )

    key: LabelKey | None = Field(None, description="taint key; omit to tolerate every taint")
    operator: Literal["Equal", "Exists"] = Field("Equal", description="'Equal' or 'Exists'")
    value: LabelValue | None = Field(None, description="taint value (operator Equal only)")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        None, description="taint effect to tolerate; omit for all effects"
    )
    toleration_seconds: int | None = Field(
        None,
        ge=0,
        description="NoExecute only: seconds the pod stays bound after the taint",
    )

    def to_manifest(self) -> dict:
        """The toleration as the Kubernetes API (and the Helm chart) spells it."""
        fields = {
            "key": self.key,
            "operator": self.operator,
            "value": self.value,
            "effect": self.effect,
            "tolerationSeconds": self.toleration_seconds,
        }
        return {k: v for k, v in fields.items() if v is not None}


# The taint that GPU node pools commonly carry (GKE, and the gpu-operator's own operands).
DEFAULT_GPU_TOLERATION = Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")


class GpuScheduling(StrictModel):
    """Where pods that request GPUs may run: applied to every GPU workload and the web app."""

    node_selector: dict[LabelKey, LabelValue] = Field(
        default_factory=dict,
        description="labels a GPU node must carry, e.g. {'nvidia.com/gpu.present': 'true'}",
    )
    tolerations: tuple[Toleration, ...] = Field(
        (DEFAULT_GPU_TOLERATION,),
        description="taints of GPU nodes that GPU pods tolerate (e.g. AKS's sku=gpu:NoSchedule)",
    )


# --- GPU operator ---------------------------------------------------------------------------


class ContainerdConfig(StrictModel):
    """Where the operator's container toolkit finds containerd (the chart's `toolkit.env`)."""

    config_path: SafePath = Field(
        "/etc/containerd/config.toml",
        description="containerd config file the toolkit edits (CONTAINERD_CONFIG); "
        "k3s: /var/lib/rancher/k3s/agent/etc/containerd/config.toml",
    )
    socket_path: SafePath = Field(
        "/run/containerd/containerd.sock",
        description="containerd socket the toolkit signals (CONTAINERD_SOCKET); "
        "k3s: /run/k3s/containerd/containerd.sock",
    )
    runtime_class: K8sName = Field(
        "nvidia",
        description="runtime class the toolkit registers (CONTAINERD_RUNTIME_CLASS)",
    )
    set_as_default: bool = Field(
        True,
        description="make the nvidia runtime containerd's default (CONTAINERD_SET_AS_DEFAULT)",
    )


def _rule_containerd_needs_toolkit(op: "GpuOperatorConfig") -> Iterator[str]:
    """containerd settings configure the toolkit; with the toolkit off they would do nothing."""
    if op.containerd is not None and not op.toolkit_enabled:
        yield (
            "containerd: only used by the operator's container toolkit, but toolkit_enabled is "
            "false; set toolkit_enabled: true, or remove containerd (a host with a preinstalled "
            "toolkit configures containerd itself)"
        )


class GpuOperatorConfig(RuledModel):
    """NVIDIA's gpu-operator Helm chart: its namespace, pinned version and the values sites change.

    A host with a preinstalled driver and container toolkit needs `driver_enabled: false` and
    `toolkit_enabled: false`; a host with only the driver preinstalled needs the first alone.
    """

    RULES: ClassVar[tuple[Rule, ...]] = (_rule_containerd_needs_toolkit,)

    chart_version: ChartVersion = Field(description="gpu-operator chart version to install, pinned (e.g. 'v25.3.0')")
    repository: str = Field(
        "https://helm.ngc.nvidia.com/nvidia",
        pattern=r"^https://[A-Za-z0-9.-]+(:[0-9]+)?(/[A-Za-z0-9._~/-]*)?$",
        description="Helm repository URL (https) holding the gpu-operator chart; a mirror may replace NVIDIA's",
    )
    chart_path: SafePath | None = Field(
        None,
        description="local folder of the gpu-operator chart, used instead of the repository "
        "(air-gapped sites, tests); its Chart.yaml version must be chart_version",
    )
    namespace: K8sName = Field(
        "gpu-operator",
        description="namespace created for the operator and its operands",
    )
    release_name: K8sName = Field("gpu-operator", description="Helm release name")
    driver_enabled: bool = Field(
        True,
        description="let the operator install the driver (false: driver preinstalled)",
    )
    toolkit_enabled: bool = Field(
        True,
        description="let the operator install the container toolkit (false: preinstalled)",
    )
    containerd: ContainerdConfig | None = Field(
        None,
        description="containerd paths for the toolkit; omit to keep the chart's defaults",
    )
    operator_node_selector: dict[LabelKey, LabelValue] = Field(
        default_factory=dict,
        description="node labels for the operator Deployment (chart: operator.nodeSelector)",
    )
    operator_tolerations: tuple[Toleration, ...] = Field(
        (),
        description="tolerations of the operator Deployment (chart: operator.tolerations); "
        "empty keeps the chart's control-plane tolerations",
    )
    daemonset_tolerations: tuple[Toleration, ...] = Field(
        (),
        description="tolerations of the operands on GPU nodes (chart: daemonsets.tolerations); "
        "empty keeps the chart's nvidia.com/gpu toleration",
    )
    timeout_seconds: int = Field(
        600,
        ge=60,
        le=3600,
        description="seconds Helm waits for the release to be ready",
    )


# --- GPU workloads from the seeds ------------------------------------------------------------


class NvidiaSmiJob(StrictModel):
    """A Job that runs `nvidia-smi` once on a GPU: proves the device plugin hands out GPUs."""

    name: K8sName = Field("nvidia-smi", description="Job name")
    image: ImageRef = Field(
        "nvidia/cuda:12.4.1-base-ubuntu22.04",
        description="CUDA base image with nvidia-smi",
    )
    gpus: GpuCount = 1
    backoff_limit: int = Field(2, ge=0, le=10, description="retries before the Job fails")


class DeviceQueryDeployment(StrictModel):
    """A Deployment that runs CUDA's deviceQuery, then sleeps (the seed's gpu-test)."""

    name: K8sName = Field("device-query", description="Deployment name")
    image: ImageRef = Field(
        "kshatrix/gpu-example:cuda-10.2",
        description="image holding the deviceQuery sample",
    )
    gpus: GpuCount = 1
    replicas: int = Field(1, ge=1, le=64, description="number of deviceQuery pods")


def _rule_notebook_node_port_needs_node_port_type(nb: "NotebookPod") -> Iterator[str]:
    """A notebook runs code for whoever reaches it: a node port is opted into, never implied."""
    if nb.node_port is not None and nb.service_type != "NodePort":
        yield (
            f"node_port: {nb.node_port} is set but service_type is {nb.service_type!r}; set "
            "service_type: NodePort to expose the notebook on every node, or remove node_port"
        )


class NotebookPod(RuledModel):
    """A TensorFlow Jupyter Pod with one GPU behind a Service (ClusterIP unless opted in)."""

    RULES: ClassVar[tuple[Rule, ...]] = (_rule_notebook_node_port_needs_node_port_type,)

    name: K8sName = Field("tf-notebook", description="Pod and Service name")
    image: ImageRef = Field(
        "tensorflow/tensorflow:2.16.1-gpu-jupyter",
        description="Jupyter image with GPU support",
    )
    gpus: GpuCount = 1
    container_port: Port = Field(8888, description="port Jupyter listens on in the container")
    service_port: Port = Field(80, description="Service port (the cluster-internal port)")
    service_type: Literal["ClusterIP", "NodePort"] = Field(
        "ClusterIP",
        description="ClusterIP (reach it with kubectl port-forward) or NodePort (on every node's "
        "address: anyone who reaches a node can run code in the notebook)",
    )
    node_port: NodePort | None = Field(
        None,
        description="fixed nodePort with service_type NodePort (the seed's 30001); omit to let Kubernetes pick one",
    )


class MnistTrainingJob(StrictModel):
    """The seed's TensorFlow MNIST training Job, with a hostPath scratch volume."""

    name: K8sName = Field("samples-tf-mnist-demo", description="Job name")
    image: ImageRef = Field(
        "mcr.microsoft.com/azuredocs/samples-tf-mnist-demo:gpu",
        description="training image; its entrypoint accepts --max_steps",
    )
    gpus: GpuCount = 1
    max_steps: int = Field(500, ge=1, le=10_000_000, description="training steps (--max_steps)")
    scratch_host_path: SafePath = Field(
        "/mnt/tmp",
        description="directory on the node used as scratch (created if missing)",
    )
    scratch_mount_path: SafePath = Field("/tmp", description="where the scratch directory appears in the container")
    backoff_limit: int = Field(4, ge=0, le=10, description="retries before the Job fails")


class GpuWorkloadsConfig(StrictModel):
    """Which of the seeds' GPU workloads to run; each is deployed only when present."""

    nvidia_smi: NvidiaSmiJob | None = Field(None, description="nvidia-smi Job; {} for defaults")
    device_query: DeviceQueryDeployment | None = Field(None, description="deviceQuery Deployment; {} for defaults")
    notebook: NotebookPod | None = Field(None, description="Jupyter Pod + Service; {} for defaults")
    mnist: MnistTrainingJob | None = Field(None, description="MNIST training Job; {} for defaults")

    def any_enabled(self) -> bool:
        """True when at least one workload is configured."""
        return any(w is not None for w in (self.nvidia_smi, self.device_query, self.notebook, self.mnist))


# --- the project's GPU web app ---------------------------------------------------------------


def _rule_cpu_request_within_limit(r: "ContainerResources") -> Iterator[str]:
    """The API server rejects a request above its limit."""
    if quantity_value(r.cpu_request) > quantity_value(r.cpu_limit):
        yield (f"cpu_request: {r.cpu_request!r} is more than cpu_limit {r.cpu_limit!r}; a request must be <= its limit")


def _rule_memory_request_within_limit(r: "ContainerResources") -> Iterator[str]:
    """The API server rejects a request above its limit."""
    if quantity_value(r.memory_request) > quantity_value(r.memory_limit):
        yield (
            f"memory_request: {r.memory_request!r} is more than memory_limit "
            f"{r.memory_limit!r}; a request must be <= its limit"
        )


class ContainerResources(RuledModel):
    """CPU and memory requests and limits of the web app container (GPUs are set apart)."""

    RULES: ClassVar[tuple[Rule, ...]] = (
        _rule_cpu_request_within_limit,
        _rule_memory_request_within_limit,
    )

    cpu_request: CpuQuantity = Field("250m", description="CPU reserved for the container")
    cpu_limit: CpuQuantity = Field("2", description="CPU the container may use at most")
    memory_request: MemoryQuantity = Field("512Mi", description="memory reserved")
    memory_limit: MemoryQuantity = Field("4Gi", description="memory at most (OOM-killed above)")


def _rule_node_port_needs_exposed_type(s: "WebAppService") -> Iterator[str]:
    """A ClusterIP Service has no node port; asking for one is a mistake, not a no-op."""
    if s.node_port is not None and s.type == "ClusterIP":
        yield (
            f"node_port: {s.node_port} is set but type is 'ClusterIP'; use type NodePort or "
            "LoadBalancer, or remove node_port"
        )


class WebAppService(RuledModel):
    """The Service in front of the web app."""

    RULES: ClassVar[tuple[Rule, ...]] = (_rule_node_port_needs_exposed_type,)

    type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = Field(
        "ClusterIP", description="Service type: ClusterIP, NodePort or LoadBalancer"
    )
    port: Port = Field(80, description="port the Service listens on")
    node_port: NodePort | None = Field(
        None,
        description="fixed nodePort (NodePort/LoadBalancer only); omit to let Kubernetes pick",
    )


class ProbeConfig(StrictModel):
    """Timing of the readiness and liveness probes on the app's /healthz."""

    initial_delay_seconds: int = Field(5, ge=0, le=600, description="wait before the first probe")
    period_seconds: int = Field(10, ge=1, le=300, description="seconds between probes")
    timeout_seconds: int = Field(3, ge=1, le=60, description="seconds before a probe times out")
    failure_threshold: int = Field(3, ge=1, le=30, description="failures before acting")


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
