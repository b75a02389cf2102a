"""The `k8s` stack through the real engine against a real Kubernetes control plane.

etcd, kube-apiserver, kube-scheduler and kube-controller-manager of one pinned version run on
loopback (tests/harness/k8s_control_plane.py), kwok plays the kubelets of three nodes: two
advertise `nvidia.com/gpu` (4 and 2), one has none. The engine (tests/harness/engine.py) runs
`pulumi up`, a second `up` that must change nothing, a change, a workload no node can hold,
and `destroy`, with the pulumi-kubernetes provider plugin of the version the SDK pins and the
gpu-operator chart from its local copy (../shared/third_party), packaged at the pinned
version the way NVIDIA's release does. What is asserted is what the API server and the
scheduler say.

Marked `engine` (not `e2e`): it changes nothing on the host besides the loopback processes it
ends itself. Needs the kept control plane and plugin (tools/k8s-control-plane.sh build).
"""

import copy
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.harness import k8s_control_plane as cp
from tests.harness.engine import Engine, pulumi_home
from tests.harness.engine import ready as engine_ready
from tests.harness.program_harness import ROOT, fixture_file

pytestmark = [pytest.mark.engine]

STACK = "k8s"
# The chart's unmodified source: in shared/third_party beside the checkout, or inside it.
CHART_SOURCE = next(
    (
        shared / "third_party" / "gpu-operator-v25.3.0" / "deployments" / "gpu-operator"
        for shared in (ROOT.parent / "shared", ROOT / "shared")
        if (shared / "third_party" / "gpu-operator-v25.3.0").is_dir()
    ),
    ROOT.parent / "shared" / "third_party" / "gpu-operator-v25.3.0" / "deployments" / "gpu-operator",
)
PLUGIN_VERSION = cp.versions()["pulumi-kubernetes"]
# Bounds: each engine run, and how long a workload may wait before `pulumi up` reports it.
RUN_TIMEOUT = 900
AWAIT_TIMEOUT = 60
WORKLOADS_NS = "gpu-workloads"
OPERATOR_NS = "gpu-operator"


def missing() -> str | None:
    for reason in (engine_ready(), cp.ready()):
        if reason:
            return reason
    listed = subprocess.run(
        ["bash", "-c", f'"$("{ROOT}/tools/pulumi-cli.sh")/pulumi" plugin ls --json'],
        capture_output=True,
        text=True,
        env={**os.environ, "PULUMI_HOME": str(pulumi_home())},
        check=False,
    )
    plugins = json.loads(listed.stdout or "[]")
    if not any(p["name"] == "kubernetes" and p["version"] == PLUGIN_VERSION for p in plugins):
        return f"no pulumi-kubernetes provider plugin v{PLUGIN_VERSION} (tools/k8s-control-plane.sh plugin)"
    if not (CHART_SOURCE / "Chart.yaml").exists():
        return f"no local copy of the gpu-operator chart at {CHART_SOURCE}"
    return None


def packaged_chart(folder: Path, version: str) -> Path:
    """The chart's source tree as its release packages it (`helm package --version V
    --app-version V`): NVIDIA's source says v1.0.0-devel until then."""
    chart = folder / "gpu-operator"
    shutil.copytree(CHART_SOURCE, chart)
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    meta["version"] = meta["appVersion"] = version
    (chart / "Chart.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))
    return chart


def stack_config(control_plane: cp.ControlPlane, chart: Path) -> dict:
    """The `k8s` stack file's kubernetes section, pointed at the test's cluster and chart."""
    document = yaml.safe_load(fixture_file(STACK).read_text())  # the tests' copy (a site may edit its own)
    kubernetes = copy.deepcopy(document["config"]["gpu-cluster:kubernetes"])
    kubernetes["kubeconfig"] = str(control_plane.kubeconfig)
    kubernetes["context"] = control_plane.context
    kubernetes["gpu_operator"]["chart_path"] = str(chart)
    kubernetes["await_timeout_seconds"] = AWAIT_TIMEOUT
    return {"kubernetes": kubernetes}


CHART_CRDS = {
    "clusterpolicies.nvidia.com",
    "nvidiadrivers.nvidia.com",
    "nodefeatures.nfd.k8s-sigs.io",
    "nodefeaturerules.nfd.k8s-sigs.io",
    "nodefeaturegroups.nfd.k8s-sigs.io",
}


def summary(output: str) -> str:
    """The engine's closing lines: the resource counts and the duration."""
    lines = output.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == "Resources:"), len(lines))
    return "\n".join(line for line in lines[start:] if line.strip())


def gpu_pods(api: cp.ControlPlane) -> list[dict]:
    """The workloads' pods that ask for GPUs and still hold them."""
    return [
        pod
        for pod in api.items(f"/api/v1/namespaces/{WORKLOADS_NS}/pods")
        if pod["status"].get("phase") not in ("Succeeded", "Failed")
        and any(cp.GPU in (c.get("resources", {}).get("limits") or {}) for c in pod["spec"]["containers"])
    ]


def placement(api: cp.ControlPlane) -> dict[str, str]:
    return {pod["metadata"]["name"]: pod["spec"].get("nodeName", "") for pod in gpu_pods(api)}


def check_gpu_placement(api: cp.ControlPlane) -> dict[str, str]:
    """Every scheduled GPU pod is on a GPU node, and no node holds more GPUs than it has."""
    capacity = {node.name: node.gpus for node in api.nodes}
    used: dict[str, int] = {}
    for pod in gpu_pods(api):
        node = pod["spec"].get("nodeName")
        if not node:
            continue
        assert capacity[node] > 0, f"{pod['metadata']['name']} landed on {node}, which has no GPU"
        used[node] = used.get(node, 0) + sum(
            int((c.get("resources", {}).get("limits") or {}).get(cp.GPU, 0)) for c in pod["spec"]["containers"]
        )
    for node, count in used.items():
        assert count <= capacity[node], f"{node} holds {count} GPUs of {capacity[node]}"
    return placement(api)


def ops(update) -> dict[str, str]:
    """Operation per resource (every type, not only commands)."""
    return {name: op for op, name in update.steps(custom_only=False)}


# CI (.ci/run) builds the control plane and the plugin beside the other tests and names the
# build's log here: this test waits for it, and fails (never skips) without its pieces.
BUILD_LOG = "GPUCLUSTER_K8S_BUILD_LOG"


def build_status(log: Path) -> tuple[str | None, str]:
    """The background build's exit status (its log's last line, `exit=N`; None while it runs)
    and the log's end."""
    text = log.read_text(errors="replace") if log.exists() else ""
    last = (text.rstrip().splitlines() or [""])[-1]
    return (last.removeprefix("exit=") if last.startswith("exit=") else None), text[-3000:]


def wait_for_the_build(log: Path, seconds: int = 3600) -> None:
    """Until the background build ended; fails, with the log's end, when it failed or outlived
    `seconds`."""
    deadline = time.monotonic() + seconds
    while (status := build_status(log))[0] is None:
        assert time.monotonic() < deadline, f"the k8s control plane's build ({log}) did not end:\n{status[1]}"
        time.sleep(5)
    assert status[0] == "0", f"the k8s control plane's build failed ({log}):\n{status[1]}"


@pytest.fixture
def cluster(tmp_path: Path):
    if os.environ.get(BUILD_LOG):
        wait_for_the_build(Path(os.environ[BUILD_LOG]))
    reason = missing()
    if reason:
        assert not os.environ.get(BUILD_LOG), f"the k8s stack cannot be tested for real: {reason}"
        pytest.skip(reason)
    with cp.ControlPlane(tmp_path / "control-plane") as control_plane:
        yield control_plane


def test_k8s_stack_against_a_real_api_server(cluster: cp.ControlPlane, tmp_path: Path) -> None:
    api = cluster
    engine = Engine(tmp_path / "engine", STACK)
    engine.init()
    chart = packaged_chart(tmp_path, "v25.3.0")
    config = stack_config(api, chart)
    engine.write_config(config)
    try:
        _lifecycle(api, engine, config)
    finally:
        # Whatever happened, the stack's objects go before the control plane does.
        if engine.resource_urns():
            engine.destroy(check=False, timeout=RUN_TIMEOUT)


def _lifecycle(api: cp.ControlPlane, engine: Engine, config: dict) -> None:
    # --- first up -------------------------------------------------------------------------------
    first = engine.up(timeout=RUN_TIMEOUT)
    assert first.returncode == 0, first.output
    print("the first `pulumi up`:\n" + summary(first.output))
    outputs = engine.outputs()
    assert outputs["k8s_gpu_operator_chart_version"] == "v25.3.0"
    assert outputs["k8s_web_app_node_port"] == 30080
    assert outputs["k8s_notebook_node_port"] == 30001

    # Objects exist, with what the API server defaulted.
    ns = api.get(f"/api/v1/namespaces/{WORKLOADS_NS}")
    assert ns is not None and ns["status"]["phase"] == "Active"
    operator_ns = api.get(f"/api/v1/namespaces/{OPERATOR_NS}")
    assert operator_ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    app = api.get(f"/apis/apps/v1/namespaces/{WORKLOADS_NS}/deployments/gpu-web-app")
    assert app["spec"]["strategy"]["type"] == "RollingUpdate"
    assert app["spec"]["revisionHistoryLimit"] == 10
    assert app["spec"]["progressDeadlineSeconds"] == 600
    container = app["spec"]["template"]["spec"]["containers"][0]
    assert container["imagePullPolicy"] == "IfNotPresent"
    assert container["terminationMessagePath"] == "/dev/termination-log"
    # The template keeps the GPU as a limit only; its pods get the request, the server's copy.
    assert cp.GPU not in container["resources"]["requests"]
    app_pods = api.items(f"/api/v1/namespaces/{WORKLOADS_NS}/pods?labelSelector=app.kubernetes.io/name%3Dgpu-web-app")
    assert [p["spec"]["containers"][0]["resources"]["requests"][cp.GPU] for p in app_pods] == ["1"]
    assert app["status"]["readyReplicas"] == 1
    service = api.get(f"/api/v1/namespaces/{WORKLOADS_NS}/services/gpu-web-app")
    assert service["spec"]["clusterIP"].startswith("10.96.")
    assert service["spec"]["ports"][0]["nodePort"] == 30080
    assert service["spec"]["sessionAffinity"] == "None"
    policies = api.items(f"/apis/networking.k8s.io/v1/namespaces/{WORKLOADS_NS}/networkpolicies")
    assert {p["metadata"]["name"] for p in policies} == set(outputs["k8s_network_policies"])

    # The chart: its CRDs before its ClusterPolicy, the operator and NFD running.
    assert api.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/clusterpolicies.nvidia.com")
    assert api.get("/apis/nvidia.com/v1/clusterpolicies/cluster-policy")
    operator = api.get(f"/apis/apps/v1/namespaces/{OPERATOR_NS}/deployments/gpu-operator")
    assert operator["status"].get("readyReplicas") == 1

    # Jobs ran to completion (kwok ends a Job's pods with success).
    for job in ("nvidia-smi", "samples-tf-mnist-demo"):
        status = api.get(f"/apis/batch/v1/namespaces/{WORKLOADS_NS}/jobs/{job}")["status"]
        assert status.get("succeeded") == 1, (job, status)
        assert any(c["type"] == "Complete" and c["status"] == "True" for c in status["conditions"])

    placed = check_gpu_placement(api)
    assert placed, "no GPU pod is running"
    print("GPU pods after the first up:", json.dumps(placed, indent=2))
    # The Jobs' pods ran on GPU nodes too, and are done.
    job_pods = {
        pod["metadata"]["name"]: (pod["spec"].get("nodeName"), pod["status"]["phase"])
        for pod in api.items(f"/api/v1/namespaces/{WORKLOADS_NS}/pods?labelSelector=batch.kubernetes.io/job-name")
    }
    print("the Jobs' pods:", json.dumps(job_pods, indent=2))
    assert len(job_pods) == 2 and all(
        phase == "Succeeded" and node in ("gpu-node-a", "gpu-node-b") for node, phase in job_pods.values()
    ), job_pods

    # --- a second up changes nothing ------------------------------------------------------------
    second = engine.up(timeout=RUN_TIMEOUT)
    assert second.returncode == 0, second.output
    changed = {name: op for name, op in ops(second).items() if op != "same"}
    assert changed == {}, changed

    # --- a change: two web app pods -------------------------------------------------------------
    config["kubernetes"]["web_app"]["replicas"] = 2
    engine.write_config(config)
    third = engine.up(timeout=RUN_TIMEOUT)
    assert third.returncode == 0, third.output
    changed = {name: op for name, op in ops(third).items() if op != "same"}
    assert changed == {"k8s-web-app-deployment": "update"}, changed
    app = api.get(f"/apis/apps/v1/namespaces/{WORKLOADS_NS}/deployments/gpu-web-app")
    assert app["status"]["readyReplicas"] == 2
    placed = check_gpu_placement(api)
    print("GPU pods after the change:", json.dumps(placed, indent=2))

    # --- more GPUs than any node has: `pulumi up` fails and says so ------------------------------
    # A bare Pod (the notebook): the provider shows the scheduler's FailedScheduling event. A
    # Deployment (deviceQuery): pulumi-kubernetes 4.25 says only that its pods never became
    # ready; the reason is on the pod (asserted below), where `kubectl describe` finds it.
    config["kubernetes"]["workloads"]["notebook"]["gpus"] = 8
    config["kubernetes"]["workloads"]["device_query"]["gpus"] = 8
    engine.write_config(config)
    over = engine.up(check=False, timeout=RUN_TIMEOUT)
    assert over.returncode != 0, over.output
    told = [
        line.strip()
        for line in over.output.splitlines()
        if "Insufficient nvidia.com/gpu" in line or "timed out waiting to be Ready" in line
    ]
    print("what `pulumi up` told the user:\n" + "\n".join(dict.fromkeys(told)))
    # The notebook's line carries the scheduler's event as a warning, then the timeout error.
    assert any(
        "k8s-gpu-workloads-notebook" in line and "FailedScheduling" in line and "Insufficient nvidia.com/gpu" in line
        for line in told
    ), over.output
    assert any("'tf-notebook' timed out waiting to be Ready" in line for line in told), over.output
    assert any("'device-query' timed out waiting to be Ready" in line for line in told), over.output
    pending = [p for p in gpu_pods(api) if not p["spec"].get("nodeName")]
    for pod in pending:
        scheduled = next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
        assert scheduled["reason"] == "Unschedulable", scheduled
        assert "Insufficient nvidia.com/gpu" in scheduled["message"], scheduled
        print(f"{pod['metadata']['name']}: {scheduled['message']}")
    assert {p["metadata"]["name"] for p in pending} >= {"tf-notebook"}
    assert len(pending) == 2, [p["metadata"]["name"] for p in pending]
    check_gpu_placement(api)

    # --- destroy leaves nothing -----------------------------------------------------------------
    gone = engine.destroy(timeout=RUN_TIMEOUT)
    assert gone.returncode == 0, gone.output
    print("`pulumi destroy`:\n" + summary(gone.output))
    assert engine.resource_urns() == []
    for path in (f"/api/v1/namespaces/{WORKLOADS_NS}", f"/api/v1/namespaces/{OPERATOR_NS}"):
        api.wait_for(f"{path} to be gone", lambda path=path: api.get(path) is None, timeout=120)
    left = [
        n["metadata"]["name"]
        for n in api.items("/apis/rbac.authorization.k8s.io/v1/clusterroles")
        if "gpu-operator" in n["metadata"]["name"] or "node-feature-discovery" in n["metadata"]["name"]
    ]
    assert left == [], left
    # Helm installs a chart's crds/ and never deletes them (helm.sh/docs/chart_best_practices/
    # custom_resource_definitions): the operator's and NFD's CRDs outlive the release, and
    # nothing else of the chart does.
    crds = sorted(
        c["metadata"]["name"]
        for c in api.items("/apis/apiextensions.k8s.io/v1/customresourcedefinitions")
        if c["spec"]["group"] in ("nvidia.com", "nfd.k8s-sigs.io")
    )
    print("CRDs left by Helm after destroy:", crds)
    assert set(crds) <= CHART_CRDS, crds
    for crd in crds:
        group, plural = crd.split(".", 1)[1], crd.split(".", 1)[0]
        listed = api.items(
            f"/apis/{group}/{api.get(f'/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd}')['spec']['versions'][0]['name']}/{plural}"
        )
        assert listed == [], (crd, [o["metadata"]["name"] for o in listed])


def test_ci_waits_for_the_control_plane_build_and_names_its_failure(tmp_path):
    log = tmp_path / "build.log"
    assert build_status(log)[0] is None  # not started yet
    log.write_text("building kube-apiserver\n")
    assert build_status(log)[0] is None
    with pytest.raises(AssertionError, match="did not end"):
        wait_for_the_build(log, seconds=0)
    log.write_text("building kube-apiserver\ngo: module lookup failed\nexit=1\n")
    with pytest.raises(AssertionError, match=r"build failed(.|\n)*module lookup failed"):
        wait_for_the_build(log)
    log.write_text("built\nexit=0\n")
    wait_for_the_build(log)
