"""The GPU web app's handlers: its settings, the job runner, the cluster snapshot and metrics,
and the Handler answering each request (endpoints and settings: gpu_web_app.py, the app).
The page it serves at `/` is web_page.py."""

import contextlib
import glob
import io
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from web_page import PAGE

SETTINGS = json.loads(Path(sys.argv[1]).read_text()) if len(sys.argv) > 1 else {}
LISTEN_ADDRESS = os.environ.get("LISTEN_ADDRESS") or SETTINGS.get("listen_address", "127.0.0.1")
PORT = int(os.environ.get("PORT") or SETTINGS.get("port", 8080))
JOB_COMMAND = list(SETTINGS.get("job_command", ["nvidia-smi"]))
MAX_CONCURRENT_JOBS = int(SETTINGS.get("max_concurrent_jobs", 2))
JOB_TIMEOUT_S = float(SETTINGS.get("job_timeout_s", 60))
MAX_CONNECTIONS = int(SETTINGS.get("max_connections", MAX_CONCURRENT_JOBS + 8))
SOCKET_TIMEOUT_S = float(SETTINGS.get("socket_timeout_s", 10))
MAX_OPEN_PER_SOURCE = int(SETTINGS.get("max_open_per_source", 32))
MAX_OPEN = 1024  # connections open at once in all (each costs a little memory, no thread)
MAX_HEAD_BYTES = 16 * 1024  # request line and headers
MAX_BODY_BYTES = 64 * 1024  # no endpoint reads a body; a small one is taken and dropped
SERVER_NAMES = {name.lower() for name in SETTINGS.get("server_names", [])} | {"localhost"}
RUN_ALLOWED = [ipaddress.ip_network(cidr) for cidr in SETTINGS.get("run_allowed_cidrs", [])]
STATUS_FILE = Path(SETTINGS.get("status_file", "/var/lib/cluster-status/cluster.json"))
STATUS_INTERVAL_S = float(SETTINGS.get("status_interval_s", 5))
GPU_DEVICE_GLOB = SETTINGS.get("gpu_device_glob", "/dev/nvidia[0-9]*")
MAX_OUTPUT_BYTES = 256 * 1024
PROMETHEUS_URL = SETTINGS.get("prometheus_url") or ""
PROMETHEUS_TIMEOUT_S = 5
HOUR_S, STEP_S = 3600, 60  # the allocation panel: the last hour, one point a minute

job_slots = threading.BoundedSemaphore(MAX_CONCURRENT_JOBS)
# What happened to run requests since start (shown by /api/info; tests read them too).
counters = {"jobs_started": 0, "refused_busy": 0, "refused_cross_origin": 0, "refused_source": 0}
counters_lock = threading.Lock()


def count(name: str) -> None:
    with counters_lock:
        counters[name] += 1


def gpu_unavailable_reason() -> str | None:
    if not glob.glob(GPU_DEVICE_GLOB):
        return f"no GPU device node ({GPU_DEVICE_GLOB}) in this container"
    if shutil.which(JOB_COMMAND[0]) is None:
        return f"{JOB_COMMAND[0]} is not installed in this container"
    return None


def cpu_matrix_product(size: int = 96) -> str:
    a = [[(i * size + j) % 7 for j in range(size)] for i in range(size)]
    b = [[(i + 2 * j) % 5 for j in range(size)] for i in range(size)]
    columns = list(zip(*b, strict=True))
    product = [[sum(x * y for x, y in zip(row, col, strict=True)) for col in columns] for row in a]
    checksum = sum(map(sum, product))
    return f"CPU fallback: {size}x{size} integer matrix product, checksum {checksum}\n"


def run_in_own_group(argv: list[str], timeout: float) -> tuple[str, int]:
    """Run argv in a new session; when it ends or times out, kill its whole process group,
    so no child it left behind (a grandchild holding the GPU) outlives the request."""
    process = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    chunks: list[bytes] = []

    def read() -> None:
        size = 0
        while data := process.stdout.read1(65536):
            if size < MAX_OUTPUT_BYTES:
                chunks.append(data[: MAX_OUTPUT_BYTES - size])
            size += len(data)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout
    # Wait for the leader without reaping it: its pid stays the group's id until we kill it.
    while os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        if time.monotonic() > deadline:
            break
        time.sleep(0.02)
    timed_out = time.monotonic() > deadline
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    returncode = process.wait()
    reader.join(timeout=2)
    output = b"".join(chunks).decode(errors="replace")
    if timed_out:
        return output + f"job killed after {timeout:g} s\n", -9
    return output, returncode


def run_job() -> tuple[int, dict]:
    started = time.monotonic()
    reason = gpu_unavailable_reason()
    host = socket.gethostname()
    if reason:
        output, returncode, mode = cpu_matrix_product(), 0, "cpu-fallback"
        device = f"CPU of {host} (no GPU job ran)"
    else:
        mode = "gpu"
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        device = ", ".join(sorted(glob.glob(GPU_DEVICE_GLOB))) + f" on {host}"
        if visible:
            device += f" (CUDA_VISIBLE_DEVICES={visible})"
        output, returncode = run_in_own_group(JOB_COMMAND, JOB_TIMEOUT_S)
    result = {
        "mode": mode,
        "reason": reason,
        "device": device,
        "command": JOB_COMMAND if mode == "gpu" else None,
        "returncode": returncode,
        "seconds": round(time.monotonic() - started, 4),
        "output": output,
    }
    return (200 if returncode == 0 else 500), result


def cluster_snapshot() -> dict:
    """The snapshot as written by the controller side, with its age added here."""
    try:
        snapshot = json.loads(STATUS_FILE.read_text())
    except FileNotFoundError:
        return {"available": False, "error": "no cluster snapshot yet (the controller side has not written one)"}
    except (OSError, ValueError) as error:
        return {"available": False, "error": f"cluster snapshot unreadable: {error}"}
    age = max(0.0, time.time() - float(snapshot.get("written_at", 0)))
    stale_after = 3 * float(snapshot.get("interval_s", STATUS_INTERVAL_S))
    return {**snapshot, "available": True, "age_s": round(age, 1), "stale": age > stale_after}


def prometheus(path: str, params: dict) -> list:
    """The `result` of a Prometheus HTTP API query (raises OSError or ValueError)."""
    url = f"{PROMETHEUS_URL}{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=PROMETHEUS_TIMEOUT_S) as response:
        answer = json.loads(response.read())
    if answer.get("status") != "success":
        raise ValueError(answer.get("error", "Prometheus did not answer success"))
    return answer["data"]["result"]


def series(result: list) -> list[list[float]]:
    """The first series of a range query as [[time, value], ...] (none: no samples)."""
    return [[float(t), float(v)] for t, v in result[0]["values"]] if result else []


def gpu_metrics(now: float | None = None) -> dict:
    """GPUs allocated and in all over the last hour, and this month's cost per account."""
    if not PROMETHEUS_URL:
        return {"available": False, "error": "no metrics: the stack has no metrics section"}
    end = time.time() if now is None else now
    window = {"start": end - HOUR_S, "end": end, "step": STEP_S}
    try:
        allocated = series(
            prometheus("/api/v1/query_range", {"query": "sum(gpucluster_node_gpus_allocated)", **window})
        )
        total = series(prometheus("/api/v1/query_range", {"query": "sum(gpucluster_node_gpus)", **window}))
        costs = prometheus("/api/v1/query", {"query": "gpucluster_account_cost_usd_month", "time": end})
        seconds = prometheus("/api/v1/query", {"query": "gpucluster_account_gpu_seconds_month", "time": end})
    except (OSError, ValueError, KeyError, IndexError) as error:
        return {"available": False, "error": f"Prometheus did not answer: {error}"}
    gpu_seconds = {item["metric"].get("account", ""): float(item["value"][1]) for item in seconds}
    accounts = sorted(
        (
            {
                "account": item["metric"].get("account", ""),
                "usd": float(item["value"][1]),
                "gpu_hours": round(gpu_seconds.get(item["metric"].get("account", ""), 0.0) / 3600, 4),
            }
            for item in costs
        ),
        key=lambda entry: (-entry["usd"], entry["account"]),
    )
    return {"available": True, **window, "allocated": allocated, "total": total, "accounts": accounts}


def known_host(host: str | None) -> bool:
    """The Host header names this app: an IP address (a browser sends the address it was
    given), localhost or one of `server_names`; never a name of another site, which is what
    a DNS rebinding page sends. No Host at all (HTTP/1.0 clients) is not a browser's."""
    if host is None:
        return True
    if "@" in host or "/" in host:
        return False
    try:
        parts = urllib.parse.urlsplit(f"//{host}")
        name, _ = parts.hostname, parts.port  # .port: ValueError when it is not a port
    except ValueError:
        return False
    if not name:
        return False
    with contextlib.suppress(ValueError):
        ipaddress.ip_address(name)
        return True
    return name.rstrip(".") in SERVER_NAMES


def cross_origin(headers, host: str | None) -> str | None:
    """Why a POST is refused as cross-origin, or None. Browsers send Sec-Fetch-Site and
    Origin on every POST; clients without them (curl) are not browsers and carry no
    ambient credentials, so they pass."""
    site = headers.get("Sec-Fetch-Site")
    if site and site not in ("same-origin", "none"):
        return f"cross-origin request refused (Sec-Fetch-Site: {site})"
    origin = headers.get("Origin")
    if origin and origin != f"http://{host}":
        return f"cross-origin request refused (Origin {origin} is not http://{host})"
    return None


class Handler(BaseHTTPRequestHandler):
    """Handles one request whose bytes the event loop has read in full (`request`); the reply
    is collected in `wfile` and sent by the event loop. So a slow client holds no thread."""

    server_version = "gpu-web-app"

    def setup(self):
        self.rfile = io.BytesIO(self.request)
        self.wfile = io.BytesIO()

    def finish(self):
        pass

    def parse_request(self) -> bool:
        if not super().parse_request():
            return False
        if not known_host(self.headers.get("Host")):
            self._reply(421, {"error": f"this app is not reached as {self.headers.get('Host')!r}"})
            return False
        return True

    def do_GET(self):
        if self.path == "/":
            self._send(200, "text/html; charset=utf-8", PAGE.encode())
        elif self.path == "/healthz":
            self._reply(200, {"status": "ok"})
        elif self.path == "/api/info":
            self._reply(
                200,
                {
                    "job_command": JOB_COMMAND,
                    "gpu_unavailable_reason": gpu_unavailable_reason(),
                    "max_concurrent_jobs": MAX_CONCURRENT_JOBS,
                    "job_timeout_s": JOB_TIMEOUT_S,
                    "run_allowed": self._run_allowed(),
                    "counters": dict(counters),
                },
            )
        elif self.path == "/api/cluster":
            self._reply(200, cluster_snapshot())
        elif self.path == "/api/metrics":
            self._reply(200, gpu_metrics())
        elif self.path == "/api/run":
            self._reply(405, {"error": "use POST to run a job"}, {"Allow": "POST"})
        else:
            self._reply(404, {"error": "not found"})

    def do_POST(self):
        if self.path != "/api/run":
            self._reply(404, {"error": "not found"})
            return
        refused = cross_origin(self.headers, self.headers.get("Host"))
        if refused:
            count("refused_cross_origin")
            self._reply(403, {"error": refused})
            return
        if not self._run_allowed():
            count("refused_source")
            self._reply(403, {"error": f"{self.client_address[0]} may not run jobs here"})
            return
        # Never queue jobs: a burst beyond the limit is refused, not started later.
        if not job_slots.acquire(blocking=False):
            count("refused_busy")
            self._reply(503, {"error": f"busy: all {MAX_CONCURRENT_JOBS} job slots are taken"})
            return
        count("jobs_started")
        try:
            self._reply(*run_job())
        finally:
            job_slots.release()

    def _run_allowed(self) -> bool:
        client = ipaddress.ip_address(self.client_address[0])
        return not RUN_ALLOWED or any(client in network for network in RUN_ALLOWED)

    def _reply(self, status: int, body: dict, headers: dict | None = None) -> None:
        self._send(status, "application/json", (json.dumps(body, indent=1) + "\n").encode(), headers)

    def _send(self, status: int, content_type: str, data: bytes, headers: dict | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        # The page needs nothing from elsewhere; nothing may frame it.
        self.send_header(
            "Content-Security-Policy",
            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
            "connect-src 'self'; img-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
        )
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format, *args):  # noqa: A002 (http.server's signature)
        pass
