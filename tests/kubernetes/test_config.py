"""The typed `gpu-cluster:kubernetes` config: the stack file, defaults, and every rule's message."""

import copy

import pytest
import yaml
from pydantic import ValidationError

from components.kubernetes.config import KubernetesConfig, all_rules
from components.kubernetes.fields import quantity_value
from tests.harness.program_harness import fixture_file

STACK_FILE = fixture_file("k8s")


def stack_section() -> dict:
    """The raw `gpu-cluster:kubernetes` object of stacks/Pulumi.k8s.yaml."""
    return yaml.safe_load(STACK_FILE.read_text())["config"]["gpu-cluster:kubernetes"]


def merged(base: dict, patch: dict) -> dict:
    """`base` with `patch` merged in recursively; a None in the patch deletes the key."""
    result = copy.deepcopy(base)
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merged(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
    return result


def config_with(patch: dict) -> dict:
    """The stack file's section with `patch` applied."""
    return merged(stack_section(), patch)


def test_stack_file_validates():
    config = KubernetesConfig.model_validate(stack_section())
    assert config.kubeconfig == "/etc/gpu-cluster/kubeconfig"
    assert config.gpu_operator is not None
    assert config.gpu_operator.chart_version == "v25.3.0"
    assert config.workloads.any_enabled()
    assert config.web_app is not None
    assert config.web_app.container_port == 8080


def test_stack_file_declares_only_this_projects_namespace():
    keys = yaml.safe_load(STACK_FILE.read_text())["config"]
    assert all(key.startswith("gpu-cluster:") for key in keys)


def test_a_workload_section_naming_its_image_deploys_it_with_the_seed_defaults():
    mnist = "mcr.microsoft.com/azuredocs/samples-tf-mnist-demo:gpu@sha256:" + "b" * 64
    config = KubernetesConfig.model_validate(
        {"workloads": {"nvidia_smi": {"image": "nvidia/cuda:12.4.1-base-ubuntu22.04"}, "mnist": {"image": mnist}}}
    )
    assert config.workloads.nvidia_smi.image == "nvidia/cuda:12.4.1-base-ubuntu22.04"
    assert config.workloads.nvidia_smi.gpus == 1
    assert config.workloads.mnist.image == mnist
    assert config.workloads.mnist.max_steps == 500
    assert config.workloads.mnist.scratch_host_path == "/mnt/tmp"
    assert config.workloads.device_query is None
    assert config.gpu_operator is None and config.web_app is None
    # Default GPU toleration: the taint GPU node pools commonly carry.
    [toleration] = config.gpu_scheduling.tolerations
    assert toleration.to_manifest() == {
        "key": "nvidia.com/gpu",
        "operator": "Exists",
        "effect": "NoSchedule",
    }


@pytest.mark.parametrize(
    ("workload", "seed"),
    [
        ("nvidia_smi", "nvidia/cuda:12.4.1-base-ubuntu22.04"),
        ("device_query", "kshatrix/gpu-example:cuda-10.2"),
        ("notebook", "tensorflow/tensorflow:2.16.1-gpu-jupyter"),
        ("mnist", "mcr.microsoft.com/azuredocs/samples-tf-mnist-demo:gpu"),
    ],
)
def test_a_seed_workload_has_no_default_image_and_the_error_suggests_the_seed_s_by_digest(workload, seed):
    """The seeds name third-party images by mutable tags, and no digest of them is verified by
    the project: an unnamed image is refused, never pulled by tag behind the operator's back."""
    with pytest.raises(ValidationError) as raised:
        KubernetesConfig.model_validate({"workloads": {workload: {}}})
    [error] = raised.value.errors()
    assert error["loc"] == ("workloads", workload)
    assert f"no default image: set one, pinned by digest, e.g. the seed's {seed}@sha256:<digest>" in error["msg"]


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        ("/", "/ is a system directory"),
        ("/etc", "/etc is a system directory"),
        ("/etc/kubernetes", "is inside /etc"),
        ("/root/.ssh", "is inside /root"),
        ("/var/lib/kubelet", "is inside /var/lib"),
        ("/home/alice", "is inside /home"),
        ("/tmp/scratch", "is inside /tmp"),
        ("/usr/local/bin", "is a system directory"),
    ],
)
def test_the_mnist_scratch_host_path_is_never_a_system_tree(path, problem):
    """The Job runs as uid 0 with it mounted read-write and created if missing."""
    with pytest.raises(ValidationError) as raised:
        KubernetesConfig.model_validate(config_with({"workloads": {"mnist": {"scratch_host_path": path}}}))
    [error] = raised.value.errors()
    assert error["loc"] == ("workloads", "mnist", "scratch_host_path")
    assert f"scratch_host_path: {path}" in error["msg"] and problem in error["msg"]


@pytest.mark.parametrize("path", ["/mnt/tmp", "/srv/scratch", "/data/mnist"])
def test_a_scratch_directory_of_its_own_is_accepted(path):
    config = KubernetesConfig.model_validate(config_with({"workloads": {"mnist": {"scratch_host_path": path}}}))
    assert config.workloads.mnist.scratch_host_path == path


def test_preinstalled_driver_and_toolkit_config_is_accepted():
    config = KubernetesConfig.model_validate(
        config_with(
            {
                "gpu_operator": {
                    "driver_enabled": False,
                    "toolkit_enabled": False,
                    "containerd": None,
                }
            }
        )
    )
    assert not config.gpu_operator.driver_enabled
    assert not config.gpu_operator.toolkit_enabled


@pytest.mark.parametrize(
    "image",
    [
        "nvidia/cuda:12.4.1-base-ubuntu22.04",
        "localhost:5000/gpu-web-app:1.0",
        "ghcr.io/example/app@sha256:" + "a" * 64,
    ],
)
def test_pinned_images_are_accepted(image):
    config = KubernetesConfig.model_validate(config_with({"web_app": {"image": image}}))
    assert config.web_app.image == image


def test_config_is_immutable():
    config = KubernetesConfig.model_validate(stack_section())
    with pytest.raises(ValidationError):
        config.namespace = "other"


@pytest.mark.parametrize(
    ("quantity", "value"),
    [
        ("500m", "0.5"),
        ("2", "2"),
        ("1Ki", "1024"),
        ("4Gi", str(4 * 2**30)),
        ("1G", "1e9"),
    ],
)
def test_quantity_value(quantity, value):
    from decimal import Decimal

    assert quantity_value(quantity) == Decimal(value)


# --- one row per validation rule: (rule, patch on the stack file, error location, message) ---

CROSS_FIELD_CASES = [
    (
        "_rule_image_named",
        {"workloads": {"device_query": {"image": None}}},
        ("workloads", "device_query"),
        "image: no default image: set one, pinned by digest, e.g. the seed's kshatrix/gpu-example:cuda-10.2@sha256:",
    ),
    (
        "_rule_exists_has_no_value",
        {"gpu_scheduling": {"tolerations": [{"key": "a", "operator": "Exists", "value": "x"}]}},
        ("gpu_scheduling", "tolerations", 0),
        "value: must be empty when operator is 'Exists' (got value 'x')",
    ),
    (
        "_rule_empty_key_needs_exists",
        {"gpu_scheduling": {"tolerations": [{"operator": "Equal", "value": "gpu"}]}},
        ("gpu_scheduling", "tolerations", 0),
        "key: required when operator is 'Equal'",
    ),
    (
        "_rule_seconds_need_no_execute",
        {
            "gpu_scheduling": {
                "tolerations": [
                    {
                        "key": "a",
                        "operator": "Exists",
                        "effect": "NoSchedule",
                        "toleration_seconds": 30,
                    }
                ]
            }
        },
        ("gpu_scheduling", "tolerations", 0),
        "toleration_seconds: only allowed with effect 'NoExecute' (effect is 'NoSchedule')",
    ),
    (
        "_rule_containerd_needs_toolkit",
        {"gpu_operator": {"toolkit_enabled": False}},
        ("gpu_operator",),
        "containerd: only used by the operator's container toolkit, but toolkit_enabled",
    ),
    (
        "_rule_cpu_request_within_limit",
        {"web_app": {"resources": {"cpu_request": "3", "cpu_limit": "2500m"}}},
        ("web_app", "resources"),
        "cpu_request: '3' is more than cpu_limit '2500m'",
    ),
    (
        "_rule_memory_request_within_limit",
        {"web_app": {"resources": {"memory_request": "8Gi", "memory_limit": "4096Mi"}}},
        ("web_app", "resources"),
        "memory_request: '8Gi' is more than memory_limit '4096Mi'",
    ),
    (
        "_rule_node_port_needs_exposed_type",
        {"web_app": {"service": {"type": "ClusterIP"}}},
        ("web_app", "service"),
        "node_port: 30080 is set but type is 'ClusterIP'",
    ),
    (
        "_rule_notebook_node_port_needs_node_port_type",
        {"workloads": {"notebook": {"service_type": "ClusterIP"}}},
        ("workloads", "notebook"),
        "node_port: 30001 is set but service_type is 'ClusterIP'; set service_type: NodePort",
    ),
    (
        "_rule_deploys_something",
        {"gpu_operator": None, "workloads": None, "web_app": None},
        (),
        "deploys nothing; add gpu_operator",
    ),
    (
        "_rule_operator_namespace_apart",
        {"namespace": "gpu-operator"},
        (),
        "gpu_operator.namespace: 'gpu-operator' is also namespace",
    ),
    (
        "_rule_unique_object_names",
        {"web_app": {"name": "nvidia-smi"}},
        (),
        "web_app.name: 'nvidia-smi' is also workloads.nvidia_smi.name",
    ),
    (
        "_rule_unique_node_ports",
        {"web_app": {"service": {"node_port": 30001}}},
        (),
        "web_app.service.node_port: 30001 is also workloads.notebook.node_port",
    ),
]

FIELD_CASES = [
    (
        "gpu-fraction",
        {"workloads": {"nvidia_smi": {"gpus": 0.5}}},
        ("workloads", "nvidia_smi", "gpus"),
        "nvidia.com/gpu takes whole GPUs only: 0.5 is not an integer",
    ),
    (
        "gpu-string",
        {"web_app": {"gpus": "1"}},
        ("web_app", "gpus"),
        "nvidia.com/gpu takes whole GPUs only: '1' is not an integer",
    ),
    (
        "gpu-zero",
        {"workloads": {"mnist": {"gpus": 0}}},
        ("workloads", "mnist", "gpus"),
        "greater than or equal to 1",
    ),
    (
        "image-without-tag",
        {"web_app": {"image": "ghcr.io/example/gpu-web-app"}},
        ("web_app", "image"),
        "image 'ghcr.io/example/gpu-web-app' has no tag",
    ),
    (
        "image-registry-port-without-tag",
        {"web_app": {"image": "localhost:5000/gpu-web-app"}},
        ("web_app", "image"),
        "has no tag",
    ),
    (
        "image-latest",
        {"workloads": {"nvidia_smi": {"image": "nvidia/cuda:latest"}}},
        ("workloads", "nvidia_smi", "image"),
        "uses the moving tag 'latest'",
    ),
    (
        "chart-version-range",
        {"gpu_operator": {"chart_version": "^25.3"}},
        ("gpu_operator", "chart_version"),
        "String should match pattern",
    ),
    (
        "chart-version-missing",
        {"gpu_operator": {"chart_version": None}},
        ("gpu_operator", "chart_version"),
        "Field required",
    ),
    (
        "web-app-image-missing",
        {"web_app": {"image": None}},
        ("web_app", "image"),
        "Field required",
    ),
    (
        "node-port-out-of-range",
        {"workloads": {"notebook": {"node_port": 8080}}},
        ("workloads", "notebook", "node_port"),
        "greater than or equal to 30000",
    ),
    (
        "unknown-key",
        {"workloads": {"nvidia-smi": {}}},
        ("workloads", "nvidia-smi"),
        "Extra inputs are not permitted",
    ),
    (
        "service-type",
        {"web_app": {"service": {"type": "ExternalName"}}},
        ("web_app", "service", "type"),
        "'ClusterIP', 'NodePort' or 'LoadBalancer'",
    ),
    (
        "cpu-quantity",
        {"web_app": {"resources": {"cpu_limit": "2 cores"}}},
        ("web_app", "resources", "cpu_limit"),
        "String should match pattern",
    ),
    (
        "object-name",
        {"namespace": "GPU_Workloads"},
        ("namespace",),
        "String should match pattern",
    ),
    (
        "node-selector-value",
        {"gpu_scheduling": {"node_selector": {"gpu": "has space"}}},
        ("gpu_scheduling", "node_selector", "gpu"),
        "String should match pattern",
    ),
    (
        "kubeconfig-relative",
        {"kubeconfig": "kube/config"},
        ("kubeconfig",),
        "must be an absolute path",
    ),
    (
        "containerd-socket-relative",
        {"gpu_operator": {"containerd": {"socket_path": "run/containerd.sock"}}},
        ("gpu_operator", "containerd", "socket_path"),
        "must be an absolute path",
    ),
    (
        "toleration-effect",
        {"gpu_scheduling": {"tolerations": [{"key": "a", "effect": "NoRun", "value": "b"}]}},
        ("gpu_scheduling", "tolerations", 0, "effect"),
        "'NoSchedule', 'PreferNoSchedule' or 'NoExecute'",
    ),
]


def _only_error(data: dict) -> dict:
    with pytest.raises(ValidationError) as caught:
        KubernetesConfig.model_validate(data)
    errors = caught.value.errors()
    assert len(errors) == 1, errors
    return errors[0]


@pytest.mark.parametrize(
    ("rule", "patch", "loc", "message"),
    CROSS_FIELD_CASES,
    ids=[case[0] for case in CROSS_FIELD_CASES],
)
def test_cross_field_rule(rule, patch, loc, message):
    error = _only_error(config_with(patch))
    assert error["loc"] == loc
    assert message in error["msg"]


@pytest.mark.parametrize(
    ("case", "patch", "loc", "message"),
    FIELD_CASES,
    ids=[case[0] for case in FIELD_CASES],
)
def test_field_rule(case, patch, loc, message):
    error = _only_error(config_with(patch))
    assert error["loc"] == loc
    assert message in error["msg"]


def test_every_cross_field_rule_has_a_case():
    tested = {case[0] for case in CROSS_FIELD_CASES}
    assert tested == set(all_rules())


def test_every_rule_has_a_docstring():
    assert all(rule.__doc__ for rule in all_rules().values())


def test_all_problems_of_a_model_are_reported_together():
    patch = {
        "web_app": {
            "resources": {
                "cpu_request": "4",
                "cpu_limit": "1",
                "memory_request": "2Gi",
                "memory_limit": "1Gi",
            }
        }
    }
    error = _only_error(config_with(patch))
    lines = error["msg"].removeprefix("Value error, ").splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("cpu_request: '4' is more than cpu_limit '1'")
    assert lines[1].startswith("memory_request: '2Gi' is more than memory_limit '1Gi'")


def test_stack_loader_reports_rule_problems_with_their_full_path():
    # Each rule's line starts with its field, so the loader can prefix the model's path.
    from components.composition.stack_config import ConfigError, parse_stack_config

    section = config_with({"gpu_scheduling": {"tolerations": [{"key": "a", "operator": "Exists", "value": "x"}]}})
    with pytest.raises(ConfigError) as caught:
        parse_stack_config({"kubernetes": section})
    assert "kubernetes.gpu_scheduling.tolerations[0].value: must be empty when operator is 'Exists'" in str(
        caught.value
    )
