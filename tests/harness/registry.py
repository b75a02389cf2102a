"""A container registry for the tests, as a site without one would run it: Debian's
docker-registry serving TLS with a certificate of a CA made here (the nodes trust it through
`containers.registries[].ca_cert`), one account (htpasswd, bcrypt), and images built here
without internet: a busybox rootfs with its own os-release, packed with umoci and pushed
with skopeo. Stopped, and its files removed, on every way out."""

import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

USERNAME = "puller"
PROGRAMS = ("docker-registry", "skopeo", "umoci", "busybox", "openssl", "htpasswd")
# What the test image says it is: a system no node runs.
IMAGE_OS_RELEASE = 'PRETTY_NAME="gpucluster test image (busybox)"\nNAME="gpucluster-test"\nID=gpucluster-test\n'


@dataclass(frozen=True)
class Registry:
    address: str  # host:port as the nodes reach it
    ca_cert: str  # PEM
    username: str
    password: str
    image: str  # REGISTRY#NAME:TAG, as Pyxis takes it (with USER@ in front for the account)


def _run(*argv: str, **kwargs) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=300, **kwargs)
    assert done.returncode == 0, f"{' '.join(argv)} failed: {done.stdout}{done.stderr}"
    return done.stdout


def _certificates(directory: Path, address: str) -> None:
    """A CA and the registry's certificate for `address` (an IP SAN)."""
    ip = address.rsplit(":", 1)[0]
    _run(*["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=gpucluster-test-ca"],
         "-keyout", str(directory / "ca.key"), "-out", str(directory / "ca.crt"))  # fmt: skip
    _run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={ip}",
         "-keyout", str(directory / "server.key"), "-out", str(directory / "server.csr"))  # fmt: skip
    # And the host's loopback: images are pushed there, before the cluster's bridge exists.
    (directory / "san.ext").write_text(f"subjectAltName=IP:{ip},IP:127.0.0.1\n")
    _run("openssl", "x509", "-req", "-in", str(directory / "server.csr"), "-CA", str(directory / "ca.crt"),
         "-CAkey", str(directory / "ca.key"), "-CAcreateserial", "-days", "2",
         "-extfile", str(directory / "san.ext"), "-out", str(directory / "server.crt"))  # fmt: skip


def _image_rootfs(root: Path) -> None:
    """busybox and the files Enroot binds over (hosts, resolv.conf, passwd, group)."""
    for folder in ("bin", "etc", "root", "tmp", "proc", "sys", "dev", "run", "var"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    _run("cp", "/bin/busybox", str(root / "bin" / "busybox"))
    applets = ("sh", "cat", "ls", "id", "sleep", "echo", "stat", "head", "grep", "env", "touch", "pwd", "true", "nproc")
    for applet in applets:
        (root / "bin" / applet).symlink_to("busybox")
    (root / "var" / "lock").symlink_to("../run/lock")
    (root / "etc" / "os-release").write_text(IMAGE_OS_RELEASE)
    (root / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (root / "etc" / "group").write_text("root:x:0:\n")
    for name in ("hosts", "resolv.conf"):
        (root / "etc" / name).write_text("")


def push_image(registry: Registry, work: Path, name: str, filler_mb: int = 0, to: str | None = None) -> None:
    """The busybox image, as registry/NAME, through the CA and the account; with `filler_mb`, a
    file /filler of that many MB of random bytes in its layer (tests/benchmark_containers.py);
    `to`: where to push (default: the registry's port on the host's loopback)."""
    layout, bundle = work / ("oci-" + name.replace("/", "-").replace(":", "-")), work / "bundle"
    _run("umoci", "init", "--layout", str(layout))
    _run("umoci", "new", "--image", f"{layout}:latest")
    _run("umoci", "unpack", "--image", f"{layout}:latest", str(bundle))
    _image_rootfs(bundle / "rootfs")
    if filler_mb:
        _run("sh", "-c", f"head -c {filler_mb}M /dev/urandom > {bundle / 'rootfs' / 'filler'}")
    _run("umoci", "repack", "--image", f"{layout}:latest", str(bundle))
    _run("umoci", "config", "--image", f"{layout}:latest", "--config.env", "PATH=/bin")
    _run("rm", "-rf", str(bundle))
    certs = work / "skopeo-certs"
    certs.mkdir(exist_ok=True)
    (certs / "ca.crt").write_text(registry.ca_cert)
    # Docker's manifest format, as most registries' images are: docker-registry answers a request
    # for an OCI manifest without an OCI Accept header with 404, and Enroot's first request for
    # a registry with Basic accounts (the one that proves the password) has no Accept header.
    to = to or f"127.0.0.1:{registry.address.rsplit(':', 1)[1]}"
    _run("skopeo", "copy", "--format", "v2s2", "--dest-cert-dir", str(certs),
         "--dest-creds", f"{registry.username}:{registry.password}",
         f"oci:{layout}:latest", f"docker://{to}/{name}")  # fmt: skip


def _serving(address: str) -> bool:
    port = address.rsplit(":", 1)[1]
    with socket.socket() as probe:
        probe.settimeout(1)
        return probe.connect_ex(("127.0.0.1", int(port))) == 0


@contextmanager
def running_registry(address: str) -> Iterator[Registry]:
    """A registry listening on every address at `address`'s port, its certificate for
    `address`; one image pushed: gpucluster/busybox:1."""
    missing = [program for program in PROGRAMS if not shutil.which(program, path=f"{os.environ['PATH']}:/usr/sbin")]
    assert not missing, f"{missing} missing: install tests/debian-packages.txt"
    port = address.rsplit(":", 1)[1]
    with tempfile.TemporaryDirectory(prefix="gpucluster-registry-") as tmp:
        work = Path(tmp)
        _certificates(work, address)
        password = secrets.token_urlsafe(18)
        _run("htpasswd", "-Bbc", str(work / "htpasswd"), USERNAME, password)
        (work / "data").mkdir()
        (work / "config.yml").write_text(
            "version: 0.1\n"
            "log: {level: warn}\n"
            f"storage: {{filesystem: {{rootdirectory: {work / 'data'}}}, delete: {{enabled: true}}}}\n"
            f"http: {{addr: ':{port}', tls: {{certificate: {work / 'server.crt'}, key: {work / 'server.key'}}}}}\n"
            f"auth: {{htpasswd: {{realm: gpucluster-test, path: {work / 'htpasswd'}}}}}\n"
        )
        log = open(work / "registry.log", "w")  # noqa: SIM115 (closed below, after the process)
        server = subprocess.Popen(
            ["docker-registry", "serve", str(work / "config.yml")],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 30
            while not _serving(address):
                assert server.poll() is None, f"docker-registry exited: {(work / 'registry.log').read_text()}"
                assert time.monotonic() < deadline, "docker-registry did not listen within 30 s"
                time.sleep(0.2)
            registry = Registry(
                address=address,
                ca_cert=(work / "ca.crt").read_text(),
                username=USERNAME,
                password=password,
                image=f"{address}#gpucluster/busybox:1",
            )
            push_image(registry, work, "gpucluster/busybox:1")
            yield registry
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()
            log.close()


def stop_left_registries() -> None:
    """What a killed test left: its registry process and files (tests/harness/e2e_teardown.py)."""
    subprocess.run(["pkill", "-f", f"docker-registry serve {tempfile.gettempdir()}/gpucluster-registry-"], check=False)
    for left in Path(tempfile.gettempdir()).glob("gpucluster-registry-*"):
        subprocess.run(["rm", "-rf", "--one-file-system", str(left)], check=False)
