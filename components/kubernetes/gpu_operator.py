"""NVIDIA's GPU operator as a Helm release, with typed values for what sites change.

This replaces the seed's `helm install ... --set toolkit.env[0].name=CONTAINERD_CONFIG ...`:
the values are built here from the typed config by a pure function, so a preview shows their
diff and a test checks them without a cluster.
"""

from pathlib import Path

import pulumi
import pulumi_kubernetes as k8s
import yaml

from components.common.options import child_options
from components.kubernetes.operator_config import GpuOperatorConfig

CHART = "gpu-operator"


def gpu_operator_namespace_manifest(config: GpuOperatorConfig) -> dict:
    """v1 Namespace for the operator, labelled privileged for Pod Security Admission.

    The operator's driver and toolkit pods run privileged with host paths; on a cluster that
    enforces the "baseline" or "restricted" level they would be refused without this label.
    """
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": config.namespace,
            "labels": {
                "app.kubernetes.io/managed-by": "pulumi",
                "app.kubernetes.io/part-of": "gpu-cluster",
                "pod-security.kubernetes.io/enforce": "privileged",
            },
        },
    }


def toolkit_env(config: GpuOperatorConfig) -> list[dict[str, str]]:
    """The chart's `toolkit.env` list for containerd (empty when containerd is not configured).

    Values are strings, as Kubernetes env values must be: set_as_default becomes "true" or
    "false" (the seed's `--set-string`).
    """
    c = config.containerd
    if c is None:
        return []
    return [
        {"name": "CONTAINERD_CONFIG", "value": c.config_path},
        {"name": "CONTAINERD_SOCKET", "value": c.socket_path},
        {"name": "CONTAINERD_RUNTIME_CLASS", "value": c.runtime_class},
        {
            "name": "CONTAINERD_SET_AS_DEFAULT",
            "value": "true" if c.set_as_default else "false",
        },
    ]


def gpu_operator_values(config: GpuOperatorConfig) -> dict:
    """Helm values for the gpu-operator chart: only what the config sets, chart defaults else."""
    toolkit: dict = {"enabled": config.toolkit_enabled}
    env = toolkit_env(config)
    if env:
        toolkit["env"] = env
    values: dict = {"driver": {"enabled": config.driver_enabled}, "toolkit": toolkit}

    operator: dict = {}
    if config.operator_node_selector:
        operator["nodeSelector"] = dict(config.operator_node_selector)
    if config.operator_tolerations:
        operator["tolerations"] = [t.to_manifest() for t in config.operator_tolerations]
    if operator:
        values["operator"] = operator
    if config.daemonset_tolerations:
        values["daemonsets"] = {"tolerations": [t.to_manifest() for t in config.daemonset_tolerations]}
    return values


def local_chart(config: GpuOperatorConfig) -> str:
    """The configured local chart folder, once its Chart.yaml says it is the pinned version.

    A local copy pins nothing by itself: the folder could hold any release (or NVIDIA's
    source tree, whose Chart.yaml says v1.0.0-devel until a release packages it).
    """
    assert config.chart_path is not None
    chart_yaml = Path(config.chart_path) / "Chart.yaml"
    try:
        chart = yaml.safe_load(chart_yaml.read_text()) or {}
    except OSError as error:
        raise ValueError(f"kubernetes.gpu_operator.chart_path: cannot read {chart_yaml}: {error.strerror}") from None
    if chart.get("name") != CHART or str(chart.get("version")) != config.chart_version:
        raise ValueError(
            f"kubernetes.gpu_operator.chart_path: {chart_yaml} is chart {chart.get('name')!r} version "
            f"{chart.get('version')!r}, not {CHART!r} {config.chart_version!r} (chart_version)"
        )
    return str(chart_yaml.parent)


def gpu_operator_release_args(config: GpuOperatorConfig) -> dict:
    """Keyword arguments of the helm.v3.Release (pinned chart, its namespace, the values)."""
    source: dict = (
        {"chart": local_chart(config)}
        if config.chart_path is not None
        else {"chart": CHART, "repository_opts": {"repo": config.repository}}
    )
    return {
        "name": config.release_name,
        **source,
        "version": config.chart_version,
        "namespace": config.namespace,
        # The namespace is a resource of its own (with its Pod Security label), not Helm's.
        "create_namespace": False,
        "values": gpu_operator_values(config),
        "timeout": config.timeout_seconds,
        # A failed install is rolled back instead of leaving half a release behind.
        "cleanup_on_fail": True,
    }


class GpuOperator(pulumi.ComponentResource):
    """NVIDIA's gpu-operator installed from its Helm chart.

    Builds:
    - `{name}-namespace`: v1 Namespace (Pod Security level privileged).
    - `{name}-release`: helm.sh/v3 Release of the gpu-operator chart at the pinned version,
      with driver/toolkit switches, containerd settings (toolkit.env), node selector and
      tolerations from the config.

    Pass the Kubernetes provider in `opts`.
    """

    namespace: pulumi.Output[str]
    """Namespace the operator runs in."""
    release_name: pulumi.Output[str]
    """Helm release name."""
    chart_version: pulumi.Output[str]
    """Chart version installed."""

    def __init__(
        self,
        name: str,
        config: GpuOperatorConfig,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("gpu-cluster:kubernetes:GpuOperator", name, None, opts)
        ns_manifest = gpu_operator_namespace_manifest(config)
        namespace = k8s.core.v1.Namespace(
            f"{name}-namespace",
            metadata=ns_manifest["metadata"],
            opts=child_options(self, opts),
        )
        release_opts = pulumi.ResourceOptions.merge(
            child_options(self, opts), pulumi.ResourceOptions(depends_on=[namespace])
        )
        release = k8s.helm.v3.Release(f"{name}-release", **gpu_operator_release_args(config), opts=release_opts)
        self.namespace = namespace.metadata.apply(lambda m: m.name)
        self.release_name = release.name
        self.chart_version = release.version
        self.register_outputs(
            {
                "namespace": self.namespace,
                "release_name": self.release_name,
                "chart_version": self.chart_version,
            }
        )
