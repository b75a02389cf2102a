"""GPU workloads from the seeds (nvidia-smi, deviceQuery, Jupyter notebook, MNIST training).

Manifests are pure functions of the typed config: they return the Kubernetes objects as plain
dicts in the API's own (camelCase) spelling. The component hands exactly these dicts to the
typed pulumi_kubernetes resources, and the schema tests validate the same dicts against the
Kubernetes OpenAPI schema, so what is tested is what is deployed.

The seeds mounted the node's driver into each container with hostPath volumes; with the GPU
operator (or a preinstalled NVIDIA container toolkit) the runtime injects the driver, so a
container only has to ask for `nvidia.com/gpu`.
"""

import pulumi
import pulumi_kubernetes as k8s

from components.common.options import child_options
from components.kubernetes.config import KubernetesConfig
from components.kubernetes.operator_config import GpuScheduling
from components.kubernetes.workload_config import DeviceQueryDeployment, MnistTrainingJob, NotebookPod, NvidiaSmiJob

GPU_RESOURCE = "nvidia.com/gpu"
PART_OF = "gpu-cluster"

# --- shared manifest pieces (also used by the web app) -----------------------------------------


def selector_labels(name: str) -> dict[str, str]:
    """Labels that tie a workload's pods to its controller and Service selectors."""
    return {"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": PART_OF}


def object_metadata(name: str, namespace: str) -> dict:
    """metadata of an object this program manages: fixed name, namespace and labels."""
    labels = {**selector_labels(name), "app.kubernetes.io/managed-by": "pulumi"}
    return {"name": name, "namespace": namespace, "labels": labels}


def gpu_limits(gpus: int) -> dict[str, str]:
    """The GPU limit. Extended resources need no request: Kubernetes copies the limit."""
    return {GPU_RESOURCE: str(gpus)}


def gpu_pod_scheduling(scheduling: GpuScheduling) -> dict:
    """nodeSelector and tolerations of a pod that requests GPUs (empty parts left out)."""
    spec: dict = {}
    if scheduling.node_selector:
        spec["nodeSelector"] = dict(scheduling.node_selector)
    if scheduling.tolerations:
        spec["tolerations"] = [t.to_manifest() for t in scheduling.tolerations]
    return spec


def pod_security(**extra) -> dict:
    """Pod-level hardening every pod gets: no service-account token (none of them talks to the
    API server), the runtime's default seccomp profile."""
    return {
        "automountServiceAccountToken": False,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}, **extra},
    }


# The images whose process needs no root run as `nobody` (GPU device nodes are injected
# world-readable by the NVIDIA runtime); the notebook and the MNIST demo write as root into
# their image and a root-owned hostPath, so they keep uid 0 but without any capability.
NOBODY = {"runAsNonRoot": True, "runAsUser": 65534, "runAsGroup": 65534}


def container_security(*, non_root: bool, read_only_root: bool) -> dict:
    """Container-level hardening: no privilege escalation, every capability dropped."""
    context: dict = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    if non_root:
        context.update(NOBODY)
    context["readOnlyRootFilesystem"] = read_only_root
    return context


def await_options(config: KubernetesConfig, opts: pulumi.ResourceOptions) -> pulumi.ResourceOptions:
    """`opts` with the config's await timeout: how long the provider waits for the object to be
    ready before `pulumi up` fails with the cluster's reason (unschedulable, image pull, ...)."""
    if config.await_timeout_seconds is None:
        return opts
    timeout = f"{config.await_timeout_seconds}s"
    return pulumi.ResourceOptions.merge(
        opts, pulumi.ResourceOptions(custom_timeouts=pulumi.CustomTimeouts(create=timeout, update=timeout))
    )


# --- one manifest function per workload ----------------------------------------------------------


def nvidia_smi_job_manifest(job: NvidiaSmiJob, namespace: str, scheduling: GpuScheduling) -> dict:
    """batch/v1 Job that runs nvidia-smi once on a GPU."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": object_metadata(job.name, namespace),
        "spec": {
            "backoffLimit": job.backoff_limit,
            "template": {
                "metadata": {"labels": selector_labels(job.name)},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "nvidia-smi",
                            "image": job.image,
                            "command": ["nvidia-smi"],
                            "resources": {"limits": gpu_limits(job.gpus)},
                            "securityContext": container_security(non_root=True, read_only_root=True),
                        }
                    ],
                    **pod_security(),
                    **gpu_pod_scheduling(scheduling),
                },
            },
        },
    }


def device_query_deployment_manifest(dq: DeviceQueryDeployment, namespace: str, scheduling: GpuScheduling) -> dict:
    """apps/v1 Deployment that runs deviceQuery and then sleeps, as the seed's gpu-test."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": object_metadata(dq.name, namespace),
        "spec": {
            "replicas": dq.replicas,
            "selector": {"matchLabels": selector_labels(dq.name)},
            "template": {
                "metadata": {"labels": selector_labels(dq.name)},
                "spec": {
                    "containers": [
                        {
                            "name": "device-query",
                            "image": dq.image,
                            "command": ["sh", "-c", "deviceQuery && sleep infinity"],
                            "resources": {"limits": gpu_limits(dq.gpus)},
                            "securityContext": container_security(non_root=True, read_only_root=True),
                        }
                    ],
                    **pod_security(),
                    **gpu_pod_scheduling(scheduling),
                },
            },
        },
    }


def notebook_pod_manifest(nb: NotebookPod, namespace: str, scheduling: GpuScheduling) -> dict:
    """v1 Pod running Jupyter with a GPU (the seed's tf-notebook)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": object_metadata(nb.name, namespace),
        "spec": {
            "containers": [
                {
                    "name": "notebook",
                    "image": nb.image,
                    "ports": [{"name": "notebook", "containerPort": nb.container_port}],
                    "resources": {"limits": gpu_limits(nb.gpus)},
                    "securityContext": container_security(non_root=False, read_only_root=False),
                }
            ],
            **pod_security(fsGroup=0),
            **gpu_pod_scheduling(scheduling),
        },
    }


def notebook_service_manifest(nb: NotebookPod, namespace: str) -> dict:
    """v1 Service in front of the notebook Pod: ClusterIP unless a NodePort is asked for."""
    port = {"name": "http", "port": nb.service_port, "targetPort": nb.container_port}
    if nb.node_port is not None:
        port["nodePort"] = nb.node_port
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_metadata(nb.name, namespace),
        "spec": {
            "type": nb.service_type,
            "selector": selector_labels(nb.name),
            "ports": [port],
        },
    }


def mnist_job_manifest(job: MnistTrainingJob, namespace: str, scheduling: GpuScheduling) -> dict:
    """batch/v1 Job training MNIST on a GPU, with a hostPath scratch volume."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": object_metadata(job.name, namespace),
        "spec": {
            "backoffLimit": job.backoff_limit,
            "template": {
                "metadata": {"labels": selector_labels(job.name)},
                "spec": {
                    "restartPolicy": "OnFailure",
                    "containers": [
                        {
                            "name": "mnist",
                            "image": job.image,
                            "args": ["--max_steps", str(job.max_steps)],
                            "imagePullPolicy": "IfNotPresent",
                            "volumeMounts": [{"name": "scratch", "mountPath": job.scratch_mount_path}],
                            "resources": {"limits": gpu_limits(job.gpus)},
                            "securityContext": container_security(non_root=False, read_only_root=False),
                        }
                    ],
                    **pod_security(),
                    "volumes": [
                        {
                            "name": "scratch",
                            "hostPath": {
                                "path": job.scratch_host_path,
                                "type": "DirectoryOrCreate",
                            },
                        }
                    ],
                    **gpu_pod_scheduling(scheduling),
                },
            },
        },
    }


def workload_manifests(config: KubernetesConfig) -> dict[str, dict]:
    """Every configured workload's manifest, keyed by role (the child resource's name suffix)."""
    w, ns, sched = config.workloads, config.namespace, config.gpu_scheduling
    manifests: dict[str, dict] = {}
    if w.nvidia_smi is not None:
        manifests["nvidia-smi"] = nvidia_smi_job_manifest(w.nvidia_smi, ns, sched)
    if w.device_query is not None:
        manifests["device-query"] = device_query_deployment_manifest(w.device_query, ns, sched)
    if w.notebook is not None:
        manifests["notebook"] = notebook_pod_manifest(w.notebook, ns, sched)
        manifests["notebook-service"] = notebook_service_manifest(w.notebook, ns)
    if w.mnist is not None:
        manifests["mnist"] = mnist_job_manifest(w.mnist, ns, sched)
    return manifests


def replaced_by_name(manifest: dict) -> bool:
    """Whether a change that replaces this object must delete the old one first: a Pod's
    containers and a Job's pod template are immutable, so such a change is a replacement, and
    the replacement has the same fixed name. Created first, it would be applied onto the old
    object (the API server refuses: a field conflict on the immutable spec)."""
    return manifest["kind"] in ("Pod", "Job")


# The typed resource class for each manifest kind the workloads use.
_RESOURCE_CLASSES = {
    ("batch/v1", "Job"): k8s.batch.v1.Job,
    ("apps/v1", "Deployment"): k8s.apps.v1.Deployment,
    ("v1", "Pod"): k8s.core.v1.Pod,
    ("v1", "Service"): k8s.core.v1.Service,
}


class GpuWorkloads(pulumi.ComponentResource):
    """The seeds' GPU workloads that the config enables, in the config's namespace.

    Builds, each only when configured:
    - `{name}-nvidia-smi`: batch/v1 Job running nvidia-smi with a GPU limit.
    - `{name}-device-query`: apps/v1 Deployment running deviceQuery.
    - `{name}-notebook` and `{name}-notebook-service`: v1 Pod (Jupyter) and a Service,
      ClusterIP unless `service_type: NodePort` is set.
    - `{name}-mnist`: batch/v1 Job training MNIST with a hostPath scratch volume.
    Every GPU pod gets the config's GPU node selector and tolerations, no service-account
    token, the runtime's default seccomp profile, and containers without capabilities or
    privilege escalation (non-root with a read-only root filesystem where the image allows).

    Pass the Kubernetes provider (and any namespace/operator dependency) in `opts`.
    """

    workload_names: pulumi.Output[dict]
    """Kubernetes object names of the deployed workloads, by config key."""
    notebook_node_port: pulumi.Output[int | None]
    """The notebook Service's node port (allocated by Kubernetes unless configured)."""

    def __init__(
        self,
        name: str,
        config: KubernetesConfig,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("gpu-cluster:kubernetes:GpuWorkloads", name, None, opts)
        children: dict[str, pulumi.CustomResource] = {}
        for role, manifest in workload_manifests(config).items():
            resource_class = _RESOURCE_CLASSES[(manifest["apiVersion"], manifest["kind"])]
            children[role] = resource_class(
                f"{name}-{role}",
                metadata=manifest["metadata"],
                spec=manifest["spec"],
                opts=await_options(config, child_options(self, opts, delete_before_replace=replaced_by_name(manifest))),
            )

        w = config.workloads
        names = {
            key: item.name
            for key, item in (
                ("nvidia_smi", w.nvidia_smi),
                ("device_query", w.device_query),
                ("notebook", w.notebook),
                ("mnist", w.mnist),
            )
            if item is not None
        }
        self.workload_names = pulumi.Output.from_input(names)
        service = children.get("notebook-service")
        if service is not None:
            self.notebook_node_port = service.spec.apply(
                lambda spec: spec.ports[0].node_port if spec and spec.ports else None
            )
        else:
            self.notebook_node_port = pulumi.Output.from_input(None)
        self.register_outputs(
            {
                "workload_names": self.workload_names,
                "notebook_node_port": self.notebook_node_port,
            }
        )
