"""A real Kubernetes control plane on loopback, for the tests that apply the `k8s` stack.

etcd, kube-apiserver, kube-scheduler and kube-controller-manager from the kept build
(tools/k8s-control-plane.sh), with certificates generated here (a CA, the apiserver's serving
certificate for 127.0.0.1, an admin client certificate in system:masters, the service-account
signing key), and kwok, which plays the kubelets: it keeps fake Nodes ready and moves their
pods through their lifecycle (Running and Ready; a Job's pods to Succeeded). The nodes are
API objects only: some advertise `nvidia.com/gpu`, one has no GPU.

Every process listens on 127.0.0.1 only, at ports picked free; `ControlPlane` is a context
manager that ends them all (their process groups) on exit, also when starting failed.
Nothing else of the host changes.
"""

import contextlib
import datetime
import ipaddress
import json
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from tests.harness.program_harness import ROOT

SCRIPT = ROOT / "tools" / "k8s-control-plane.sh"
BINARIES = ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kwok")
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
GPU = "nvidia.com/gpu"
# Ranges the apiserver allocates from; nothing ever sends a packet to them (kwok's pods have
# made-up IPs, and no proxy runs).
SERVICE_CIDR = "10.96.0.0/16"
POD_CIDR = "10.244.0.0/16"
MEMORY_LIMIT = "768MiB"


def binaries_dir() -> Path | None:
    """The kept control plane's folder, found without building anything."""
    done = subprocess.run([str(SCRIPT)], capture_output=True, text=True, check=False)
    return Path(done.stdout.strip()) if done.returncode == 0 else None


def versions() -> dict[str, str]:
    out = subprocess.run([str(SCRIPT), "versions"], capture_output=True, text=True, check=True).stdout
    return dict(item.split("=", 1) for item in out.split())


def ready() -> str | None:
    """None when the control plane can start here, else what is missing."""
    if binaries_dir() is None:
        return "no kept Kubernetes control plane (tools/k8s-control-plane.sh build makes one from its Go modules)"
    return None


@dataclass(frozen=True)
class FakeNode:
    name: str
    gpus: int = 0
    cpu: str = "32"
    memory: str = "256Gi"
    pods: int = 110

    def manifest(self) -> dict:
        labels = {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "type": "kwok",
        }
        capacity = {"cpu": self.cpu, "memory": self.memory, "pods": str(self.pods)}
        if self.gpus:
            # What NVIDIA's GPU feature discovery and device plugin put on a GPU node.
            labels["nvidia.com/gpu.present"] = "true"
            capacity[GPU] = str(self.gpus)
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.name, "labels": labels, "annotations": {KWOK_ANNOTATION: "fake"}},
            "spec": {},
            "status": {
                "capacity": capacity,
                "allocatable": capacity,
                "nodeInfo": {
                    "architecture": "amd64",
                    "operatingSystem": "linux",
                    "kubeletVersion": "fake",
                    "kubeProxyVersion": "fake",
                },
                "phase": "Running",
            },
        }


DEFAULT_NODES = (FakeNode("gpu-node-a", gpus=4), FakeNode("gpu-node-b", gpus=2), FakeNode("cpu-node", gpus=0))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _certificates(folder: Path) -> None:
    """CA, apiserver serving cert, admin client cert, service-account key pair (PEM files)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)

    def key_pem(key) -> bytes:
        return key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )

    def name(cn: str, org: str | None = None) -> x509.Name:
        parts = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
        if org:
            parts.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
        return x509.Name(parts)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = name("gpu-cluster-test-ca")
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )

    def leaf(cn: str, org: str | None, usage, sans: list | None) -> tuple[bytes, bytes]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(name(cn, org))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        return cert.public_bytes(serialization.Encoding.PEM), key_pem(key)

    serving_sans = [
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.IPAddress(ipaddress.ip_address("10.96.0.1")),
        x509.DNSName("localhost"),
        x509.DNSName("kubernetes"),
        x509.DNSName("kubernetes.default"),
        x509.DNSName("kubernetes.default.svc"),
    ]
    files = {"ca.crt": ca.public_bytes(serialization.Encoding.PEM), "ca.key": key_pem(ca_key)}
    files["apiserver.crt"], files["apiserver.key"] = leaf(
        "kube-apiserver", None, ExtendedKeyUsageOID.SERVER_AUTH, serving_sans
    )
    files["admin.crt"], files["admin.key"] = leaf("admin", "system:masters", ExtendedKeyUsageOID.CLIENT_AUTH, None)
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    files["sa.key"] = key_pem(sa_key)
    files["sa.pub"] = sa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    for file_name, data in files.items():
        path = folder / file_name
        path.write_bytes(data)
        path.chmod(0o600)


@dataclass
class ControlPlane:
    """The control plane in `workdir` (a fresh folder); use it as a context manager."""

    workdir: Path
    nodes: tuple[FakeNode, ...] = DEFAULT_NODES
    context: str = "gpu-cluster"
    start_timeout: float = 120.0
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)

    def __post_init__(self) -> None:
        folder = binaries_dir()
        assert folder is not None, ready()
        self.bin = folder
        self.certs = self.workdir / "pki"
        self.logs = self.workdir / "logs"
        self.kubeconfig = self.workdir / "kubeconfig"
        self.port = _free_port()

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    # --- lifecycle --------------------------------------------------------------------------

    def __enter__(self) -> "ControlPlane":
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _spawn(self, name: str, *args: str) -> None:
        log = open(self.logs / f"{name}.log", "wb")  # noqa: SIM115 (the process owns it)
        self.processes[name] = subprocess.Popen(
            [str(self.bin / name), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            # A bound on each process's heap: the Go runtime collects harder near it.
            env={**os.environ, "GOMEMLIMIT": MEMORY_LIMIT},
        )
        log.close()

    def log_tail(self, name: str, lines: int = 30) -> str:
        path = self.logs / f"{name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def _check_alive(self) -> None:
        for name, process in self.processes.items():
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited with {process.returncode}:\n{self.log_tail(name)}")

    def start(self) -> None:
        for folder in (self.certs, self.logs):
            folder.mkdir(parents=True, exist_ok=True)
        _certificates(self.certs)
        c = self.certs
        etcd_client, etcd_peer = _free_port(), _free_port()
        self._spawn(
            "etcd",
            "--name=test",
            f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls=http://127.0.0.1:{etcd_client}",
            f"--advertise-client-urls=http://127.0.0.1:{etcd_client}",
            f"--listen-peer-urls=http://127.0.0.1:{etcd_peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}",
            f"--initial-cluster=test=http://127.0.0.1:{etcd_peer}",
            "--listen-metrics-urls=",
            "--unsafe-no-fsync",
            "--quota-backend-bytes=1073741824",
            "--log-level=warn",
        )
        self._spawn(
            "kube-apiserver",
            f"--etcd-servers=http://127.0.0.1:{etcd_client}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.port}",
            f"--tls-cert-file={c / 'apiserver.crt'}",
            f"--tls-private-key-file={c / 'apiserver.key'}",
            f"--client-ca-file={c / 'ca.crt'}",
            f"--service-account-key-file={c / 'sa.pub'}",
            f"--service-account-signing-key-file={c / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--authorization-mode=Node,RBAC",
            "--allow-privileged=true",
            "--profiling=false",
            "--v=1",
        )
        self._write_kubeconfig()
        self._wait("the API server to be ready", lambda: self._ready_endpoint())
        common = [f"--kubeconfig={self.kubeconfig}", "--leader-elect=false", "--secure-port=0", "--profiling=false"]
        self._spawn("kube-scheduler", *common)
        self._spawn(
            "kube-controller-manager",
            *common,
            f"--service-account-private-key-file={c / 'sa.key'}",
            f"--root-ca-file={c / 'ca.crt'}",
            "--use-service-account-credentials=false",
        )
        self._spawn(
            "kwok",
            f"--config={self.bin / 'kwok-stages.yaml'}",
            f"--kubeconfig={self.kubeconfig}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}=fake",
            f"--cidr={POD_CIDR}",
            "--node-ip=10.244.0.1",
            "--server-address=",
        )
        for node in self.nodes:
            self.request("POST", "/api/v1/nodes", node.manifest())
        self._wait("kwok to make the nodes Ready", self._nodes_ready)
        # Pods are refused in a namespace until its `default` ServiceAccount exists.
        self._wait(
            "the default ServiceAccount", lambda: self._exists("/api/v1/namespaces/default/serviceaccounts/default")
        )

    def stop(self) -> None:
        """SIGTERM every process group, then SIGKILL what is left after 10 s."""
        for process in reversed(list(self.processes.values())):
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for process in self.processes.values():
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)

    def _wait(self, what: str, condition, timeout: float | None = None) -> None:
        deadline = time.monotonic() + (timeout or self.start_timeout)
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                if condition():
                    return
            except (OSError, urllib.error.URLError, ValueError):
                pass
            time.sleep(0.5)
        logs = "\n".join(f"--- {name}\n{self.log_tail(name, 15)}" for name in self.processes)
        raise TimeoutError(f"timed out waiting for {what}\n{logs}")

    def _ready_endpoint(self) -> bool:
        return self._raw("GET", "/readyz")[0] == 200

    def _nodes_ready(self) -> bool:
        nodes = self.request("GET", "/api/v1/nodes")["items"]
        ready = {
            n["metadata"]["name"]
            for n in nodes
            for cond in n.get("status", {}).get("conditions") or []
            if cond["type"] == "Ready" and cond["status"] == "True"
        }
        return ready >= {node.name for node in self.nodes}

    def _exists(self, path: str) -> bool:
        return self._raw("GET", path)[0] == 200

    def _write_kubeconfig(self) -> None:
        c = self.certs
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "test", "cluster": {"server": self.server, "certificate-authority": str(c / "ca.crt")}}
            ],
            "users": [
                {
                    "name": "admin",
                    "user": {"client-certificate": str(c / "admin.crt"), "client-key": str(c / "admin.key")},
                }
            ],
            "contexts": [{"name": self.context, "context": {"cluster": "test", "user": "admin"}}],
            "current-context": self.context,
        }
        self.kubeconfig.write_text(json.dumps(config, indent=2))

    # --- the API ------------------------------------------------------------------------------

    def _ssl(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.certs / "ca.crt"))
        context.load_cert_chain(str(self.certs / "admin.crt"), str(self.certs / "admin.key"))
        return context

    def _raw(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict | str]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.server + path, data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, context=self._ssl(), timeout=30) as response:
                text = response.read().decode()
                status = response.status
        except urllib.error.HTTPError as error:
            text, status = error.read().decode(errors="replace"), error.code
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text

    def request(self, method: str, path: str, body: dict | None = None) -> dict:
        """One API call as the admin; an error status raises with the server's message."""
        status, answer = self._raw(method, path, body)
        if status >= 300:
            raise RuntimeError(f"{method} {path}: {status} {answer}")
        assert isinstance(answer, dict), answer
        return answer

    def get(self, path: str) -> dict | None:
        """The object at `path`, None when the server says 404."""
        status, answer = self._raw("GET", path)
        if status == 404:
            return None
        if status >= 300:
            raise RuntimeError(f"GET {path}: {status} {answer}")
        assert isinstance(answer, dict), answer
        return answer

    def items(self, path: str) -> list[dict]:
        return self.request("GET", path)["items"]

    def wait_for(self, what: str, condition, timeout: float = 120.0):
        """Poll `condition()` until it returns something truthy; return that."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            self._check_alive()
            last = condition()
            if last:
                return last
            time.sleep(1)
        raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")
