"""The generated manifests against the Kubernetes API's OpenAPI schema, offline.

kubernetes-validate (PyPI) ships the JSON schemas of each Kubernetes minor release inside the
package, so this needs no cluster and no network. Its strict mode forbids properties the API
does not define, so a misspelt field fails here instead of being dropped by the API server
(which is what the non-strict check, and the official client's models, would let through).

Checked are the very dicts the components pass to pulumi_kubernetes (the manifest functions),
and also what the components actually registered under mocks.
"""

import copy

import kubernetes_validate
import pytest
import yaml

from components.kubernetes.config import KubernetesConfig
from components.kubernetes.gpu_operator import gpu_operator_values
from components.kubernetes.target import all_manifests
from tests.harness.k8s_mocks import run_build_kubernetes
from tests.harness.program_harness import fixture_file

STACK_FILE = fixture_file("k8s")

# Oldest and newest Kubernetes minor releases the manifests are checked against.
K8S_VERSIONS = ("1.29", "1.33")


def stack_raw() -> dict:
    return yaml.safe_load(STACK_FILE.read_text())["config"]["gpu-cluster:kubernetes"]


def config_variants() -> dict[str, KubernetesConfig]:
    """The stack file, and variants that exercise the other manifest branches."""
    raw = stack_raw()
    return {
        "stack-file": KubernetesConfig.model_validate(raw),
        "load-balancer-preinstalled-driver": KubernetesConfig.model_validate(
            {
                **raw,
                "gpu_scheduling": {"tolerations": []},
                "gpu_operator": {
                    "chart_version": "v25.3.0",
                    "driver_enabled": False,
                    "toolkit_enabled": False,
                },
                "workloads": {
                    "notebook": {"image": "tensorflow/tensorflow:2.16.1-gpu-jupyter"},
                    "mnist": {
                        "image": "mcr.microsoft.com/azuredocs/samples-tf-mnist-demo:gpu@sha256:" + "c" * 64,
                        "gpus": 2,
                    },
                },
                "web_app": {
                    "image": "ghcr.io/example/gpu-web-app:0.1.0",
                    "gpus": 2,
                    "replicas": 3,
                    "service": {"type": "LoadBalancer", "port": 443},
                },
            }
        ),
        "cluster-ip-defaults": KubernetesConfig.model_validate(
            {"web_app": {"image": "ghcr.io/example/gpu-web-app:0.1.0"}}
        ),
    }


def strict(manifest: dict, version: str) -> None:
    kubernetes_validate.validate(manifest, version, strict=True)


def manifest_cases() -> list:
    cases = []
    for variant, config in config_variants().items():
        for manifest in all_manifests(config):
            name = f"{variant}:{manifest['kind']}:{manifest['metadata']['name']}"
            cases.extend(pytest.param(manifest, v, id=f"{name}@{v}") for v in K8S_VERSIONS)
    return cases


@pytest.mark.parametrize(("manifest", "version"), manifest_cases())
def test_manifest_is_valid_for_the_kubernetes_api(manifest, version):
    strict(manifest, version)


def test_every_kind_the_target_creates_is_checked():
    kinds = {m["kind"] for c in config_variants().values() for m in all_manifests(c)}
    assert kinds == {"Namespace", "Job", "Deployment", "Pod", "Service", "NetworkPolicy"}


def test_registered_inputs_are_valid_manifests():
    # What reached the engine: the same dicts, after Pulumi's serialization (numbers as
    # floats, which JSON Schema's "integer" accepts when they are whole).
    run = run_build_kubernetes(KubernetesConfig.model_validate(stack_raw()))
    checked = 0
    for resource in run.kubernetes_resources():
        if "apiVersion" not in resource.inputs:  # the Helm release is not a Kubernetes object
            continue
        manifest = {
            key: resource.inputs[key] for key in ("apiVersion", "kind", "metadata", "spec") if key in resource.inputs
        }
        for version in K8S_VERSIONS:
            strict(manifest, version)
        checked += 1
    assert checked == 12


def test_helm_values_tolerations_and_node_selector_are_valid_pod_fields():
    operator = KubernetesConfig.model_validate(
        {
            **stack_raw(),
            "gpu_operator": {
                "chart_version": "v25.3.0",
                "operator_node_selector": {"node-role.kubernetes.io/control-plane": ""},
                "operator_tolerations": [
                    {
                        "key": "node-role.kubernetes.io/control-plane",
                        "operator": "Exists",
                    }
                ],
                "daemonset_tolerations": [
                    {
                        "key": "sku",
                        "value": "gpu",
                        "effect": "NoExecute",
                        "toleration_seconds": 60,
                    }
                ],
            },
        }
    ).gpu_operator
    values = gpu_operator_values(operator)
    for pod_spec in (values["operator"], values["daemonsets"]):
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "probe"},
            "spec": {
                "containers": [{"name": "c", "image": "busybox:1.36"}],
                **pod_spec,
            },
        }
        strict(pod, K8S_VERSIONS[-1])


# --- the check must fail on a wrong manifest -------------------------------------------------


def web_app_deployment() -> dict:
    config = config_variants()["stack-file"]
    [deployment] = [
        m for m in all_manifests(config) if m["kind"] == "Deployment" and m["metadata"]["name"] == "gpu-web-app"
    ]
    return copy.deepcopy(deployment)


def _container(manifest: dict) -> dict:
    return manifest["spec"]["template"]["spec"]["containers"][0]


def _misspelt_field(m: dict) -> None:
    _container(m)["resource"] = _container(m).pop("resources")


def _unknown_field(m: dict) -> None:
    _container(m)["gpus"] = 1


def _port_as_string(m: dict) -> None:
    _container(m)["ports"][0]["containerPort"] = "8000"


def _replicas_as_text(m: dict) -> None:
    m["spec"]["replicas"] = "one"


def _env_value_as_number(m: dict) -> None:
    _container(m)["env"][0]["value"] = 8000


def _probe_path_in_wrong_place(m: dict) -> None:
    _container(m)["readinessProbe"]["path"] = "/healthz"


def _container_without_name(m: dict) -> None:
    del _container(m)["name"]


def _tolerations_as_mapping(m: dict) -> None:
    m["spec"]["template"]["spec"]["tolerations"] = {"key": "nvidia.com/gpu"}


BREAKAGES = [
    ("misspelt field", _misspelt_field, "'resource' was unexpected"),
    ("unknown field", _unknown_field, "'gpus' was unexpected"),
    ("port as string", _port_as_string, "'8000' is not of type 'integer'"),
    ("replicas as text", _replicas_as_text, "'one' is not of type 'integer'"),
    ("env value as number", _env_value_as_number, "8000 is not of type 'string'"),
    ("probe path misplaced", _probe_path_in_wrong_place, "'path' was unexpected"),
    (
        "container without name",
        _container_without_name,
        "'name' is a required property",
    ),
    ("tolerations as mapping", _tolerations_as_mapping, "is not of type 'array'"),
]


def test_the_unbroken_manifest_passes():
    strict(web_app_deployment(), K8S_VERSIONS[-1])


@pytest.mark.parametrize(("case", "breakage", "message"), BREAKAGES, ids=[case[0] for case in BREAKAGES])
def test_a_wrong_manifest_fails_validation(case, breakage, message):
    manifest = web_app_deployment()
    breakage(manifest)
    with pytest.raises(kubernetes_validate.ValidationError) as caught:
        strict(manifest, K8S_VERSIONS[-1])
    assert message in str(caught.value)


def test_non_strict_validation_would_miss_an_unknown_field():
    # Why strict mode: without it the schema allows any extra property.
    manifest = web_app_deployment()
    _unknown_field(manifest)
    kubernetes_validate.validate(manifest, K8S_VERSIONS[-1], strict=False)
