"""The Kubernetes config of the GPU workloads (the seeds') and of the project's GPU web app.
Cross-field rules are named functions in each model's `RULES`."""

from collections.abc import Iterator
from typing import Annotated, ClassVar, Literal

from pydantic import (
    AfterValidator,
    Field,
)

from components.common.config_types import Port, SafePath, StrictModel
from components.host.rules import LXC_DIR_FORBIDDEN_TREES, _system_dir_problem
from components.kubernetes.fields import (
    CpuQuantity,
    GpuCount,
    ImageRef,
    K8sName,
    MemoryQuantity,
    NodePort,
    Rule,
    RuledModel,
    quantity_value,
)

# --- GPU workloads from the seeds ------------------------------------------------------------


# The seeds' images, by tag: suggested in the errors and docs, never used unnamed.
NVIDIA_SMI_SEED = "nvidia/cuda:12.4.1-base-ubuntu22.04"
DEVICE_QUERY_SEED = "kshatrix/gpu-example:cuda-10.2"
NOTEBOOK_SEED = "tensorflow/tensorflow:2.16.1-gpu-jupyter"
MNIST_SEED = "mcr.microsoft.com/azuredocs/samples-tf-mnist-demo:gpu"


def _rule_image_named(w: "SeedWorkload") -> Iterator[str]:
    """The seeds name third-party images by tag, which their registries can move, and no digest
    of them is verified here: the operator names the image (the seed's, pinned by digest)."""
    if w.image is None:
        yield (
            f"image: no default image: set one, pinned by digest, e.g. the seed's {w.SEED}@sha256:<digest> "
            f"(`docker buildx imagetools inspect {w.SEED}` prints the digest; docs/kubernetes.md)"
        )


class SeedWorkload(RuledModel):
    """A seed's workload: its image has no default (_rule_image_named)."""

    SEED: ClassVar[str]
    RULES: ClassVar[tuple[Rule, ...]] = (_rule_image_named,)


def _image_field(seed: str):
    return Field(None, description=f"image, best pinned by @sha256: digest (required; the seed's: {seed})")


def _scratch_path(value: str) -> str:
    # The MNIST Job mounts it read-write, created if missing, as uid 0: never a system tree,
    # the kubelet's or the container runtime's state (/var/lib), root's home or a user-writable one.
    problem = _system_dir_problem("scratch_host_path", value, (*LXC_DIR_FORBIDDEN_TREES, "/root", "/var/lib"))
    if problem:
        raise ValueError(problem)
    return value


class NvidiaSmiJob(SeedWorkload):
    """A Job that runs `nvidia-smi` once on a GPU: proves the device plugin hands out GPUs."""

    name: K8sName = Field("nvidia-smi", description="Job name")
    SEED: ClassVar[str] = NVIDIA_SMI_SEED
    image: ImageRef | None = _image_field(NVIDIA_SMI_SEED)
    gpus: GpuCount = 1
    backoff_limit: int = Field(2, ge=0, le=10, description="retries before the Job fails")


class DeviceQueryDeployment(SeedWorkload):
    """A Deployment that runs CUDA's deviceQuery, then sleeps (the seed's gpu-test)."""

    name: K8sName = Field("device-query", description="Deployment name")
    SEED: ClassVar[str] = DEVICE_QUERY_SEED
    image: ImageRef | None = _image_field(DEVICE_QUERY_SEED)
    gpus: GpuCount = 1
    replicas: int = Field(1, ge=1, le=64, description="number of deviceQuery pods")


def _rule_notebook_node_port_needs_node_port_type(nb: "NotebookPod") -> Iterator[str]:
    """A notebook runs code for whoever reaches it: a node port is opted into, never implied."""
    if nb.node_port is not None and nb.service_type != "NodePort":
        yield (
            f"node_port: {nb.node_port} is set but service_type is {nb.service_type!r}; set "
            "service_type: NodePort to expose the notebook on every node, or remove node_port"
        )


class NotebookPod(SeedWorkload):
    """A TensorFlow Jupyter Pod with one GPU behind a Service (ClusterIP unless opted in)."""

    RULES: ClassVar[tuple[Rule, ...]] = (_rule_image_named, _rule_notebook_node_port_needs_node_port_type)

    name: K8sName = Field("tf-notebook", description="Pod and Service name")
    SEED: ClassVar[str] = NOTEBOOK_SEED
    image: ImageRef | None = _image_field(NOTEBOOK_SEED)
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


class MnistTrainingJob(SeedWorkload):
    """The seed's TensorFlow MNIST training Job, with a hostPath scratch volume."""

    name: K8sName = Field("samples-tf-mnist-demo", description="Job name")
    SEED: ClassVar[str] = MNIST_SEED
    image: ImageRef | None = _image_field(MNIST_SEED)
    gpus: GpuCount = 1
    max_steps: int = Field(500, ge=1, le=10_000_000, description="training steps (--max_steps)")
    scratch_host_path: Annotated[SafePath, AfterValidator(_scratch_path)] = Field(
        "/mnt/tmp",
        description="directory on the node used as scratch (created if missing; mounted read-write for uid 0, "
        "so no system, root's, /var/lib or user-writable tree)",
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
