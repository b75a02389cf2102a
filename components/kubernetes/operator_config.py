"""The Kubernetes config of GPU scheduling (tolerations, node selector) and of NVIDIA's GPU
operator. Cross-field rules are named functions in each model's `RULES`."""

from collections.abc import Iterator
from typing import ClassVar, Literal

from pydantic import (
    Field,
)

from components.common.config_types import SafePath, StrictModel
from components.kubernetes.fields import ChartVersion, K8sName, LabelKey, LabelValue, Rule, RuledModel

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
