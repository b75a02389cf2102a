"""What applying the `k8s` stack to a real API server (tests/kubernetes/test_e2e_k8s.py) showed
that the mocks could not, checked fast: the gpu-operator chart from a local folder
(`gpu_operator.chart_path`), still pinned; the workloads' await timeout
(`await_timeout_seconds`); fixed-name objects whose changes replace them are deleted first."""

from pathlib import Path

import pulumi
import pytest
import yaml

from components.kubernetes.config import GpuOperatorConfig, KubernetesConfig
from components.kubernetes.gpu_operator import gpu_operator_release_args
from components.kubernetes.workloads import await_options, replaced_by_name, workload_manifests
from tests.harness.k8s_mocks import RecordingMocks, RecordingMonitor


def chart(folder: Path, name: str = "gpu-operator", version: str = "v25.3.0") -> Path:
    folder.mkdir(parents=True)
    (folder / "Chart.yaml").write_text(yaml.safe_dump({"apiVersion": "v2", "name": name, "version": version}))
    return folder


def test_a_local_chart_of_the_pinned_version_replaces_the_repository(tmp_path):
    path = chart(tmp_path / "gpu-operator")
    args = gpu_operator_release_args(GpuOperatorConfig(chart_version="v25.3.0", chart_path=str(path)))
    assert args["chart"] == str(path)
    assert "repository_opts" not in args
    assert args["version"] == "v25.3.0"


def test_without_chart_path_the_chart_comes_from_the_repository():
    args = gpu_operator_release_args(GpuOperatorConfig(chart_version="v25.3.0"))
    assert args["chart"] == "gpu-operator"
    assert args["repository_opts"] == {"repo": "https://helm.ngc.nvidia.com/nvidia"}


@pytest.mark.parametrize(
    ("name", "version"),
    [("gpu-operator", "v1.0.0-devel"), ("gpu-operator", "v24.9.2"), ("node-feature-discovery", "v25.3.0")],
)
def test_a_local_chart_of_another_version_or_name_is_refused(tmp_path, name, version):
    path = chart(tmp_path / "chart", name=name, version=version)
    with pytest.raises(ValueError, match="chart_path") as error:
        gpu_operator_release_args(GpuOperatorConfig(chart_version="v25.3.0", chart_path=str(path)))
    assert version in str(error.value) and "v25.3.0" in str(error.value)


def test_a_missing_local_chart_is_named(tmp_path):
    with pytest.raises(ValueError, match=r"cannot read .*Chart\.yaml"):
        gpu_operator_release_args(GpuOperatorConfig(chart_version="v25.3.0", chart_path=str(tmp_path / "nope")))


def test_the_await_timeout_becomes_create_and_update_timeouts():
    config = KubernetesConfig(
        workloads={"nvidia_smi": {"image": "nvidia/cuda:12.4.1-base-ubuntu22.04"}}, await_timeout_seconds=90
    )
    opts = await_options(config, pulumi.ResourceOptions())
    assert (opts.custom_timeouts.create, opts.custom_timeouts.update) == ("90s", "90s")
    unset = KubernetesConfig(workloads={"nvidia_smi": {"image": "nvidia/cuda:12.4.1-base-ubuntu22.04"}})
    assert await_options(unset, pulumi.ResourceOptions()).custom_timeouts is None


def test_pods_and_jobs_are_deleted_before_their_replacement():
    """A Pod's containers and a Job's template are immutable: a change replaces them, and the
    replacement has the same name (the API server refused it created first: a field conflict)."""
    config = KubernetesConfig(
        workloads={
            "nvidia_smi": {"image": "nvidia/cuda:12.4.1-base-ubuntu22.04"},
            "device_query": {"image": "kshatrix/gpu-example:cuda-10.2"},
            "notebook": {"image": "tensorflow/tensorflow:2.16.1-gpu-jupyter"},
            "mnist": {"image": "mcr.microsoft.com/azuredocs/samples-tf-mnist-demo:gpu"},
        }
    )
    kinds = {role: (m["kind"], replaced_by_name(m)) for role, m in workload_manifests(config).items()}
    assert kinds == {
        "nvidia-smi": ("Job", True),
        "device-query": ("Deployment", False),
        "notebook": ("Pod", True),
        "notebook-service": ("Service", False),
        "mnist": ("Job", True),
    }


def test_the_registrations_carry_delete_before_replace():
    from components.kubernetes.target import build_kubernetes

    mocks = RecordingMocks()
    pulumi.runtime.set_mocks(mocks, preview=False, monitor=RecordingMonitor(mocks))

    @pulumi.runtime.test
    def program():
        config = KubernetesConfig(
            workloads={
                "nvidia_smi": {"image": "nvidia/cuda:12.4.1-base-ubuntu22.04"},
                "device_query": {"image": "kshatrix/gpu-example:cuda-10.2"},
                "notebook": {"image": "tensorflow/tensorflow:2.16.1-gpu-jupyter"},
            }
        )
        return pulumi.Output.from_input(build_kubernetes(config)["k8s_namespace"])

    program()
    first = {name: request.deleteBeforeReplace for (type_, name), request in mocks.requests.items()}
    assert first["k8s-gpu-workloads-notebook"] is True
    assert first["k8s-gpu-workloads-nvidia-smi"] is True
    assert first["k8s-gpu-workloads-device-query"] is False
