"""The Kubernetes target under Pulumi mocks: what build_kubernetes registers and exports.

Assertions are on the inputs the engine would receive (camelCase keys; numbers arrive as
floats, hence `as_int`). Each test builds the target afresh from a config.
"""

import pytest
import yaml

from components.kubernetes.config import KubernetesConfig
from tests.harness.k8s_mocks import MockRun, Registered, as_int, run_build_kubernetes
from tests.harness.program_harness import fixture_file

STACK_FILE = fixture_file("k8s")
GPU = "nvidia.com/gpu"

DEPLOYMENT = "kubernetes:apps/v1:Deployment"
JOB = "kubernetes:batch/v1:Job"
POD = "kubernetes:core/v1:Pod"
SERVICE = "kubernetes:core/v1:Service"
NAMESPACE = "kubernetes:core/v1:Namespace"
RELEASE = "kubernetes:helm.sh/v3:Release"
POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
PROVIDER = "pulumi:providers:kubernetes"


def stack_config(**overrides) -> KubernetesConfig:
    """The config of stacks/Pulumi.k8s.yaml, with top-level keys replaced by `overrides`."""
    raw = yaml.safe_load(STACK_FILE.read_text())["config"]["gpu-cluster:kubernetes"]
    return KubernetesConfig.model_validate({**raw, **overrides})


def stack_run(**overrides) -> MockRun:
    return run_build_kubernetes(stack_config(**overrides))


def pod_spec(resource: Registered) -> dict:
    """The pod spec of a Pod, or of a Job's or Deployment's pod template."""
    spec = resource.inputs["spec"]
    return spec if resource.type == POD else spec["template"]["spec"]


def pod_labels(resource: Registered) -> dict:
    if resource.type == POD:
        return resource.inputs["metadata"]["labels"]
    return resource.inputs["spec"]["template"]["metadata"]["labels"]


def gpu_pods(run: MockRun) -> list[Registered]:
    return [r for r in run.resources if r.type in (DEPLOYMENT, JOB, POD)]


def selects(selector: dict, labels: dict) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


# --- the resource set --------------------------------------------------------------------------


def test_stack_creates_exactly_these_resources():
    run = stack_run()
    assert sorted((r.type, r.name) for r in run.resources) == sorted(
        [
            (PROVIDER, "k8s"),
            (NAMESPACE, "k8s-namespace"),
            ("gpu-cluster:kubernetes:GpuOperator", "k8s-gpu-operator"),
            (NAMESPACE, "k8s-gpu-operator-namespace"),
            (RELEASE, "k8s-gpu-operator-release"),
            ("gpu-cluster:kubernetes:GpuWorkloads", "k8s-gpu-workloads"),
            (JOB, "k8s-gpu-workloads-nvidia-smi"),
            (DEPLOYMENT, "k8s-gpu-workloads-device-query"),
            (POD, "k8s-gpu-workloads-notebook"),
            (SERVICE, "k8s-gpu-workloads-notebook-service"),
            (JOB, "k8s-gpu-workloads-mnist"),
            ("gpu-cluster:kubernetes:WebApp", "k8s-web-app"),
            (DEPLOYMENT, "k8s-web-app-deployment"),
            (SERVICE, "k8s-web-app-service"),
            (POLICY, "k8s-netpol-default-deny-ingress"),
            (POLICY, "k8s-netpol-web-app"),
            (POLICY, "k8s-netpol-notebook"),
        ]
    )


@pytest.mark.parametrize(
    ("type_", "name", "api_version", "kind"),
    [
        (NAMESPACE, "k8s-namespace", "v1", "Namespace"),
        (NAMESPACE, "k8s-gpu-operator-namespace", "v1", "Namespace"),
        (JOB, "k8s-gpu-workloads-nvidia-smi", "batch/v1", "Job"),
        (DEPLOYMENT, "k8s-gpu-workloads-device-query", "apps/v1", "Deployment"),
        (POD, "k8s-gpu-workloads-notebook", "v1", "Pod"),
        (SERVICE, "k8s-gpu-workloads-notebook-service", "v1", "Service"),
        (JOB, "k8s-gpu-workloads-mnist", "batch/v1", "Job"),
        (DEPLOYMENT, "k8s-web-app-deployment", "apps/v1", "Deployment"),
        (SERVICE, "k8s-web-app-service", "v1", "Service"),
    ],
)
def test_api_version_and_kind(type_, name, api_version, kind):
    resource = stack_run().one(type_, name)
    assert (resource.inputs["apiVersion"], resource.inputs["kind"]) == (
        api_version,
        kind,
    )


def test_every_kubernetes_resource_uses_the_configured_provider():
    run = stack_run()
    provider = run.one(PROVIDER, "k8s")
    assert provider.inputs == {
        "kubeconfig": "/etc/gpu-cluster/kubeconfig",
        "context": "gpu-cluster",
    }
    for resource in run.kubernetes_resources():
        assert resource.provider.endswith(f"{PROVIDER}::k8s::k8s-id"), resource.name


def test_provider_without_kubeconfig_uses_the_ambient_one():
    run = stack_run(kubeconfig=None, context=None)
    assert run.one(PROVIDER, "k8s").inputs == {}


def test_children_are_parented_to_their_component():
    run = stack_run()
    owners = {
        "k8s-gpu-operator-": "gpu-cluster:kubernetes:GpuOperator::k8s-gpu-operator",
        "k8s-gpu-workloads-": "gpu-cluster:kubernetes:GpuWorkloads::k8s-gpu-workloads",
        "k8s-web-app-": "gpu-cluster:kubernetes:WebApp::k8s-web-app",
    }
    for resource in run.kubernetes_resources():
        expected = [urn for prefix, urn in owners.items() if resource.name.startswith(prefix)]
        if expected:
            assert resource.parent.endswith(expected[0]), resource.name


def test_gpu_pods_wait_for_the_namespace_and_the_operator():
    run = stack_run()
    for resource in gpu_pods(run) + [r for r in run.resources if r.type == SERVICE]:
        assert run.depends_on(resource, NAMESPACE, "k8s-namespace"), resource.name
        assert run.depends_on(resource, RELEASE, "k8s-gpu-operator-release"), resource.name


def test_release_waits_for_its_namespace():
    run = stack_run()
    release = run.one(RELEASE, "k8s-gpu-operator-release")
    assert run.depends_on(release, NAMESPACE, "k8s-gpu-operator-namespace")


def test_kubernetes_alone_with_only_the_web_app():
    run = stack_run(gpu_operator=None, workloads={}, create_namespace=False)
    assert {r.type for r in run.kubernetes_resources()} == {DEPLOYMENT, SERVICE, POLICY}
    assert {
        r.type for r in stack_run(gpu_operator=None, workloads={}, network_policy=False).kubernetes_resources()
    } == {
        NAMESPACE,
        DEPLOYMENT,
        SERVICE,
    }
    assert run.outputs["k8s_gpu_operator_release"] is None
    assert run.outputs["k8s_workloads"] == {}
    assert run.outputs["k8s_web_app_service"] == "gpu-web-app"


# --- exposure and hardening ------------------------------------------------------------------------


def test_the_notebook_gets_no_node_port_unless_asked():
    run = stack_run(workloads={"notebook": {"image": "tensorflow/tensorflow:2.16.1-gpu-jupyter"}})
    spec = run.one(SERVICE, "k8s-gpu-workloads-notebook-service").inputs["spec"]
    assert spec["type"] == "ClusterIP" and "nodePort" not in spec["ports"][0]
    assert run.outputs["k8s_notebook_node_port"] is None
    # Its policy then admits only pods of the namespace.
    [rule] = run.one(POLICY, "k8s-netpol-notebook").inputs["spec"]["ingress"]
    assert rule["from"] == [{"podSelector": {}}]
    assert [as_int(p["port"]) for p in rule["ports"]] == [8888]


def test_every_pod_is_hardened():
    run = stack_run()
    for resource in gpu_pods(run):
        spec = pod_spec(resource)
        assert spec["automountServiceAccountToken"] is False, resource.name
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, resource.name
        for container in spec["containers"]:
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False, resource.name
            assert context["capabilities"] == {"drop": ["ALL"]}, resource.name
    # Non-root with a read-only root where the image allows; the notebook and MNIST write as root.
    non_root = {
        r.name
        for r in gpu_pods(run)
        if pod_spec(r)["containers"][0]["securityContext"].get("runAsNonRoot")
        and pod_spec(r)["containers"][0]["securityContext"]["readOnlyRootFilesystem"]
    }
    assert non_root == {"k8s-gpu-workloads-nvidia-smi", "k8s-gpu-workloads-device-query", "k8s-web-app-deployment"}


def test_ingress_is_denied_but_for_the_app_and_the_opted_in_notebook():
    run = stack_run()
    deny = run.one(POLICY, "k8s-netpol-default-deny-ingress").inputs
    assert deny["metadata"]["namespace"] == "gpu-workloads"
    assert deny["spec"] == {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": []}
    app = run.one(POLICY, "k8s-netpol-web-app").inputs["spec"]
    assert selects(app["podSelector"]["matchLabels"], pod_labels(run.one(DEPLOYMENT, "k8s-web-app-deployment")))
    assert [[as_int(p["port"]) for p in rule["ports"]] for rule in app["ingress"]] == [[8080]]
    notebook = run.one(POLICY, "k8s-netpol-notebook").inputs["spec"]
    assert selects(notebook["podSelector"]["matchLabels"], pod_labels(run.one(POD, "k8s-gpu-workloads-notebook")))
    # NodePort opted in (the stack): from anywhere, on the notebook's port only.
    assert [("from" in rule, [as_int(p["port"]) for p in rule["ports"]]) for rule in notebook["ingress"]] == [
        (False, [8888])
    ]


# --- GPU requests, scheduling, selectors and ports ------------------------------------------------


def test_every_gpu_container_has_a_whole_gpu_limit():
    run = stack_run()
    pods = gpu_pods(run)
    assert len(pods) == 5
    for resource in pods:
        for container in pod_spec(resource)["containers"]:
            assert container["resources"]["limits"][GPU] == "1", resource.name


def test_gpu_count_from_config_reaches_the_limit():
    run = stack_run(workloads={"mnist": {"image": "mcr.microsoft.com/azuredocs/samples-tf-mnist-demo:gpu", "gpus": 2}})
    [container] = pod_spec(run.one(JOB, "k8s-gpu-workloads-mnist"))["containers"]
    assert container["resources"]["limits"] == {GPU: "2"}


def test_every_gpu_pod_gets_the_gpu_node_selector_and_tolerations():
    run = stack_run()
    for resource in gpu_pods(run):
        spec = pod_spec(resource)
        assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}, resource.name
        assert spec["tolerations"] == [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
        ], resource.name


def test_deployment_selectors_match_their_pod_labels():
    run = stack_run()
    for resource in run.resources:
        if resource.type == DEPLOYMENT:
            selector = resource.inputs["spec"]["selector"]["matchLabels"]
            assert selector and selects(selector, pod_labels(resource)), resource.name


@pytest.mark.parametrize(
    ("service_name", "target"),
    [
        ("k8s-gpu-workloads-notebook-service", "k8s-gpu-workloads-notebook"),
        ("k8s-web-app-service", "k8s-web-app-deployment"),
    ],
)
def test_service_selects_only_its_pods_and_targets_their_port(service_name, target):
    run = stack_run()
    service = run.one(SERVICE, service_name)
    selector = service.inputs["spec"]["selector"]
    selected = [r.name for r in gpu_pods(run) if selects(selector, pod_labels(r))]
    assert selected == [target]
    [pod] = [r for r in gpu_pods(run) if r.name == target]
    container_ports = {as_int(p["containerPort"]) for c in pod_spec(pod)["containers"] for p in c["ports"]}
    for port in service.inputs["spec"]["ports"]:
        assert as_int(port["targetPort"]) in container_ports


def test_notebook_service_is_the_seeds_node_port():
    spec = stack_run().one(SERVICE, "k8s-gpu-workloads-notebook-service").inputs["spec"]
    assert spec["type"] == "NodePort"
    [port] = spec["ports"]
    assert (
        as_int(port["port"]),
        as_int(port["targetPort"]),
        as_int(port["nodePort"]),
    ) == (
        80,
        8888,
        30001,
    )


# --- the workloads from the seeds ---------------------------------------------------------------


def test_nvidia_smi_job_runs_nvidia_smi_from_a_pinned_cuda_image():
    job = stack_run().one(JOB, "k8s-gpu-workloads-nvidia-smi")
    spec = pod_spec(job)
    [container] = spec["containers"]
    assert container["command"] == ["nvidia-smi"]
    assert container["image"].startswith("nvidia/cuda:")
    assert not container["image"].endswith(":latest")
    assert spec["restartPolicy"] == "Never"
    assert job.inputs["metadata"]["name"] == "nvidia-smi"


def test_device_query_deployment_runs_device_query():
    deployment = stack_run().one(DEPLOYMENT, "k8s-gpu-workloads-device-query")
    [container] = pod_spec(deployment)["containers"]
    assert container["command"] == ["sh", "-c", "deviceQuery && sleep infinity"]
    assert container["image"] == "kshatrix/gpu-example:cuda-10.2"
    assert as_int(deployment.inputs["spec"]["replicas"]) == 1


def test_notebook_pod_matches_the_seed():
    pod = stack_run().one(POD, "k8s-gpu-workloads-notebook")
    spec = pod.inputs["spec"]
    assert as_int(spec["securityContext"]["fsGroup"]) == 0
    [container] = spec["containers"]
    assert [(p["name"], as_int(p["containerPort"])) for p in container["ports"]] == [("notebook", 8888)]
    assert pod.inputs["metadata"]["name"] == "tf-notebook"


def test_mnist_job_has_a_host_path_scratch_volume_and_gpu_tolerations():
    job = stack_run().one(JOB, "k8s-gpu-workloads-mnist")
    spec = pod_spec(job)
    [container] = spec["containers"]
    assert container["args"] == ["--max_steps", "500"]
    assert container["imagePullPolicy"] == "IfNotPresent"
    assert container["volumeMounts"] == [{"name": "scratch", "mountPath": "/tmp"}]
    assert spec["volumes"] == [
        {
            "name": "scratch",
            "hostPath": {"path": "/mnt/tmp", "type": "DirectoryOrCreate"},
        }
    ]
    assert spec["restartPolicy"] == "OnFailure"
    assert {
        "key": "sku",
        "operator": "Equal",
        "value": "gpu",
        "effect": "NoSchedule",
    } in spec["tolerations"]


# --- the web app ------------------------------------------------------------------------------


@pytest.mark.parametrize("app_port", [8000, 9090])
def test_web_app_port_is_one_value_everywhere(app_port):
    raw = yaml.safe_load(STACK_FILE.read_text())["config"]["gpu-cluster:kubernetes"]
    run = stack_run(web_app={**raw["web_app"], "container_port": app_port})
    [container] = pod_spec(run.one(DEPLOYMENT, "k8s-web-app-deployment"))["containers"]
    service_spec = run.one(SERVICE, "k8s-web-app-service").inputs["spec"]
    assert [as_int(p["containerPort"]) for p in container["ports"]] == [app_port]
    assert as_int(container["readinessProbe"]["httpGet"]["port"]) == app_port
    assert as_int(container["livenessProbe"]["httpGet"]["port"]) == app_port
    assert [as_int(p["targetPort"]) for p in service_spec["ports"]] == [app_port]
    assert {"name": "PORT", "value": str(app_port)} in container["env"]


def test_web_app_probes_hit_healthz():
    run = stack_run()
    [container] = pod_spec(run.one(DEPLOYMENT, "k8s-web-app-deployment"))["containers"]
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["path"] == "/healthz"
        assert as_int(container[probe]["periodSeconds"]) == 10


def test_web_app_requests_and_limits():
    run = stack_run()
    [container] = pod_spec(run.one(DEPLOYMENT, "k8s-web-app-deployment"))["containers"]
    assert container["resources"] == {
        "requests": {"cpu": "250m", "memory": "512Mi"},
        "limits": {"cpu": "2", "memory": "4Gi", GPU: "1"},
    }
    assert container["image"] == "ghcr.io/example/gpu-web-app:0.1.0"


@pytest.mark.parametrize(
    ("service", "expected_node_port"),
    [
        ({"type": "NodePort", "port": 80, "node_port": 30080}, 30080),
        ({"type": "LoadBalancer", "port": 443}, None),
        ({"type": "ClusterIP", "port": 8080}, None),
    ],
)
def test_web_app_service_type_and_port_from_config(service, expected_node_port):
    raw = yaml.safe_load(STACK_FILE.read_text())["config"]["gpu-cluster:kubernetes"]
    run = stack_run(web_app={**raw["web_app"], "service": service})
    spec = run.one(SERVICE, "k8s-web-app-service").inputs["spec"]
    assert spec["type"] == service["type"]
    [port] = spec["ports"]
    assert as_int(port["port"]) == service["port"]
    assert as_int(port.get("nodePort")) == expected_node_port
    assert run.outputs["k8s_web_app_service_port"] == service["port"]
    assert run.outputs["k8s_web_app_node_port"] == expected_node_port


# --- the GPU operator's Helm release ------------------------------------------------------------

SEED_TOOLKIT_ENV = [
    {"name": "CONTAINERD_CONFIG", "value": "/etc/containerd/config.toml"},
    {"name": "CONTAINERD_SOCKET", "value": "/run/containerd/containerd.sock"},
    {"name": "CONTAINERD_RUNTIME_CLASS", "value": "nvidia"},
    {"name": "CONTAINERD_SET_AS_DEFAULT", "value": "true"},
]


def release_inputs(**operator) -> dict:
    raw = yaml.safe_load(STACK_FILE.read_text())["config"]["gpu-cluster:kubernetes"]
    gpu_operator = {**raw["gpu_operator"], **operator}
    return stack_run(gpu_operator=gpu_operator).one(RELEASE, "k8s-gpu-operator-release").inputs


def test_release_installs_the_pinned_chart_from_nvidias_repository():
    inputs = release_inputs()
    assert inputs["chart"] == "gpu-operator"
    assert inputs["version"] == "v25.3.0"
    assert inputs["repositoryOpts"] == {"repo": "https://helm.ngc.nvidia.com/nvidia"}
    assert inputs["namespace"] == "gpu-operator"
    assert inputs["name"] == "gpu-operator"
    assert inputs["createNamespace"] is False


def test_release_values_for_a_containerd_site_are_the_seeds_toolkit_env():
    values = release_inputs()["values"]
    assert values == {
        "driver": {"enabled": True},
        "toolkit": {"enabled": True, "env": SEED_TOOLKIT_ENV},
    }


def test_release_values_for_a_host_with_preinstalled_driver_and_toolkit():
    values = release_inputs(driver_enabled=False, toolkit_enabled=False, containerd=None)["values"]
    assert values == {"driver": {"enabled": False}, "toolkit": {"enabled": False}}


def test_release_values_for_a_k3s_site():
    containerd = {
        "config_path": "/var/lib/rancher/k3s/agent/etc/containerd/config.toml",
        "socket_path": "/run/k3s/containerd/containerd.sock",
        "set_as_default": False,
    }
    env = release_inputs(driver_enabled=False, containerd=containerd)["values"]["toolkit"]["env"]
    assert env == [
        {"name": "CONTAINERD_CONFIG", "value": containerd["config_path"]},
        {"name": "CONTAINERD_SOCKET", "value": containerd["socket_path"]},
        {"name": "CONTAINERD_RUNTIME_CLASS", "value": "nvidia"},
        {"name": "CONTAINERD_SET_AS_DEFAULT", "value": "false"},
    ]


def test_release_values_carry_node_selector_and_tolerations():
    values = release_inputs(
        operator_node_selector={"node-role.kubernetes.io/control-plane": ""},
        operator_tolerations=[{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}],
        daemonset_tolerations=[
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "sku", "value": "gpu", "effect": "NoSchedule"},
        ],
    )["values"]
    assert values["operator"] == {
        "nodeSelector": {"node-role.kubernetes.io/control-plane": ""},
        "tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}],
    }
    assert values["daemonsets"] == {
        "tolerations": [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
        ]
    }


def test_operator_namespace_is_privileged_for_pod_security():
    namespace = stack_run().one(NAMESPACE, "k8s-gpu-operator-namespace")
    labels = namespace.inputs["metadata"]["labels"]
    assert namespace.inputs["metadata"]["name"] == "gpu-operator"
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"


# --- outputs ---------------------------------------------------------------------------------


def test_stack_outputs():
    assert stack_run().outputs == {
        "k8s_namespace": "gpu-workloads",
        "k8s_gpu_operator_namespace": "gpu-operator",
        "k8s_gpu_operator_release": "gpu-operator",
        "k8s_gpu_operator_chart_version": "v25.3.0",
        "k8s_workloads": {
            "nvidia_smi": "nvidia-smi",
            "device_query": "device-query",
            "notebook": "tf-notebook",
            "mnist": "samples-tf-mnist-demo",
        },
        "k8s_notebook_node_port": 30001,
        "k8s_web_app_deployment": "gpu-web-app",
        "k8s_web_app_service": "gpu-web-app",
        "k8s_web_app_service_port": 80,
        "k8s_web_app_node_port": 30080,
        "k8s_web_app_cluster_url": "http://gpu-web-app.gpu-workloads.svc.cluster.local:80",
        "k8s_web_app_load_balancer": None,
        "k8s_network_policies": ["default-deny-ingress", "gpu-web-app-ingress", "tf-notebook-ingress"],
    }
