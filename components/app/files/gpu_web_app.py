"""The GPU web app: a page at `/` with a Run button, and its JSON API under `/api/`.

Runs in the web app container under systemd, Python standard library only. Endpoints:
  GET  /              the page (inline CSS and JS, no external fetch: it works offline)
  POST /api/run       runs one job, answers its output and timing as JSON (503 when busy)
  GET  /api/info      what the page needs to say before a run (command, GPU or fallback, slots)
  GET  /api/cluster   the cluster snapshot the controller side writes, with its age
  GET  /api/metrics   GPUs allocated over the last hour and this month's cost per account,
                      asked of the cluster's Prometheus (when the stack has metrics)
  GET  /healthz       {"status": "ok"}
Settings come from the JSON file named by the first argument (written by webapp_create.sh):
  listen_address       address to listen on (the container's address the forward targets)
  port                 port to listen on (the port the host forward targets)
  job_command          the GPU job's argv (e.g. ["nvidia-smi"])
  max_concurrent_jobs  jobs running at once; a run beyond that gets 503 at once
  job_timeout_s        a job running longer is killed with its whole process group
  max_connections      requests handled at once (a fixed pool of threads); a connection
                       still sending its request holds no thread
  socket_timeout_s     a client whose whole request has not arrived this long after it
                       connected is dropped (a slow sender too, not only a silent one)
  max_open_per_source  connections one source address may hold open at once (more: closed)
  server_names         names the app may be reached by (the Host header), besides IP
                       addresses and localhost: any other name is refused (421), so a page
                       of another site re-resolved to this address (DNS rebinding) gets nothing
  run_allowed_cidrs    source networks allowed to run jobs (empty: any)
  status_file          the cluster snapshot (a read-only mount in the container)
  status_interval_s    how often the snapshot is written (older than 3 intervals is stale)
  gpu_device_glob      where GPU device nodes appear (default /dev/nvidia[0-9]*)
  prometheus_url       the cluster's Prometheus (http://address:port), or absent: no metrics panel
The environment variables PORT and LISTEN_ADDRESS, when set, win over the file.
When the job cannot run here (no GPU device node, or the command is missing) the app runs
a small CPU matrix product instead and says so in `mode`.
"""

import asyncio
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
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler
from pathlib import Path

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


class Server:
    """An asyncio front: each connection's request is read by the event loop, within
    SOCKET_TIMEOUT_S of its connect and at most MAX_HEAD_BYTES, then handled by a fixed pool of
    MAX_CONNECTIONS threads. Slow or silent clients cost no thread, are dropped at their
    deadline, and one source address holds at most MAX_OPEN_PER_SOURCE connections."""

    def __init__(self):
        self.pool = ThreadPoolExecutor(MAX_CONNECTIONS, thread_name_prefix="request")
        self.open: dict[str, int] = {}

    async def connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        source = peer[0]
        if self.open.get(source, 0) >= MAX_OPEN_PER_SOURCE or sum(self.open.values()) >= MAX_OPEN:
            writer.transport.abort()
            return
        self.open[source] = self.open.get(source, 0) + 1
        try:
            request = await asyncio.wait_for(self.read_request(reader), SOCKET_TIMEOUT_S)
            reply = await asyncio.get_running_loop().run_in_executor(self.pool, respond, request, peer[:2])
            writer.write(reply)
            await asyncio.wait_for(writer.drain(), SOCKET_TIMEOUT_S)
            writer.close()
        except (TimeoutError, ValueError, EOFError, ConnectionError, asyncio.LimitOverrunError):
            pass  # too slow, too big, or gone: dropped
        finally:
            self.open[source] -= 1
            if not self.open[source]:
                del self.open[source]
            if not writer.is_closing():
                writer.transport.abort()

    @staticmethod
    async def read_request(reader: asyncio.StreamReader) -> bytes:
        head = await reader.readuntil(b"\r\n\r\n")  # LimitOverrunError past MAX_HEAD_BYTES
        length = 0
        for line in head.split(b"\r\n"):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        if not 0 <= length <= MAX_BODY_BYTES:
            raise ValueError("request body too large")
        return head + await reader.readexactly(length)


def respond(request: bytes, client_address: tuple) -> bytes:
    handler = Handler(request, client_address, None)
    return handler.wfile.getvalue()


async def serve() -> None:
    server = Server()
    listener = await asyncio.start_server(
        server.connection, LISTEN_ADDRESS, PORT, limit=MAX_HEAD_BYTES, backlog=64, reuse_address=True
    )
    async with listener:
        await listener.serve_forever()


def main() -> None:
    asyncio.run(serve())


PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>GPU web app</title>
<style>
  body { font: 15px/1.45 system-ui, sans-serif; margin: 0; background: #f4f5f7; color: #1d2330; }
  main { max-width: 980px; margin: 0 auto; padding: 20px; display: grid; gap: 16px;
         grid-template-columns: minmax(0, 3fr) minmax(0, 2fr); }
  header { grid-column: 1 / -1; }
  h1 { margin: 0 0 4px; font-size: 22px; }
  h2 { margin: 0 0 10px; font-size: 16px; }
  section { background: #fff; border: 1px solid #d8dce3; border-radius: 8px; padding: 16px; }
  button { font: inherit; font-weight: 600; padding: 8px 22px; border-radius: 6px; border: 0;
           background: #2457c5; color: #fff; cursor: pointer; }
  button:disabled { background: #8a9bbf; cursor: wait; }
  .muted { color: #5c6578; font-size: 13px; }
  .badge { display: inline-block; padding: 2px 10px; border-radius: 10px; font-weight: 700; font-size: 13px; }
  .badge.gpu { background: #d8f5df; color: #135c25; }
  .badge.cpu-fallback { background: #fff0c2; color: #6b4a00; }
  .notice { padding: 8px 12px; border-radius: 6px; margin: 10px 0 0; }
  .notice.error { background: #fde2e1; color: #8a1c14; }
  .notice.busy { background: #fff0c2; color: #6b4a00; }
  dl { display: grid; grid-template-columns: max-content 1fr; gap: 4px 12px; margin: 12px 0; }
  dt { color: #5c6578; }
  dd { margin: 0; }
  pre { background: #10141c; color: #e6e9ef; padding: 12px; border-radius: 6px; overflow: auto;
        max-height: 360px; white-space: pre-wrap; word-break: break-word; margin: 0; }
  table { border-collapse: collapse; width: 100%; font-size: 14px; }
  th, td { text-align: left; padding: 4px 6px; border-bottom: 1px solid #e6e8ee; }
  section.wide { grid-column: 1 / -1; }
  #gpu-chart { width: 100%; height: auto; display: block; }
  #gpu-chart .axis { stroke: #8a93a6; stroke-width: 1; }
  #gpu-chart .grid { stroke: #e6e8ee; stroke-width: 1; }
  #gpu-chart .total { fill: none; stroke: #8a93a6; stroke-width: 1.5; stroke-dasharray: 5 4; }
  #gpu-chart .allocated { fill: rgba(36, 87, 197, 0.15); stroke: #2457c5; stroke-width: 2; }
  #gpu-chart text { font: 12px system-ui, sans-serif; fill: #5c6578; }
  [hidden] { display: none !important; }
</style>
</head>
<body>
<main>
  <header>
    <h1>GPU web app</h1>
    <div class="muted" id="about">Loading&hellip;</div>
  </header>
  <section aria-labelledby="run-title">
    <h2 id="run-title">Run a GPU job</h2>
    <button id="run" type="button">Run</button>
    <span class="muted" id="running" hidden>running&hellip;</span>
    <div id="notice" class="notice" role="status" hidden></div>
    <div id="result" hidden>
      <dl>
        <dt>Mode</dt><dd><span id="mode" class="badge"></span></dd>
        <dt>Device</dt><dd id="device"></dd>
        <dt>Duration</dt><dd id="duration"></dd>
        <dt>Exit code</dt><dd id="returncode"></dd>
        <dt id="reason-label" hidden>Why</dt><dd id="reason" hidden></dd>
      </dl>
      <pre id="output"></pre>
    </div>
  </section>
  <section aria-labelledby="cluster-title">
    <h2 id="cluster-title">Cluster</h2>
    <div class="muted" id="snapshot-age">Loading&hellip;</div>
    <table id="nodes" hidden>
      <thead><tr><th>Node</th><th>State</th><th>GPUs used / total</th></tr></thead>
      <tbody></tbody>
    </table>
    <p id="gpus" hidden></p>
    <h2>Jobs</h2>
    <p id="jobs-summary" class="muted"></p>
    <table id="jobs" hidden>
      <thead><tr><th>Job</th><th>State</th><th>Name</th><th>GRES</th></tr></thead>
      <tbody></tbody>
    </table>
  </section>
  <section class="wide" aria-labelledby="usage-title">
    <h2 id="usage-title">GPUs allocated, last hour</h2>
    <div class="muted" id="metrics-state">Loading&hellip;</div>
    <svg id="gpu-chart" viewBox="0 0 640 180" role="img" aria-label="GPUs allocated over the last hour" hidden></svg>
    <p id="gpu-now" hidden></p>
    <h2>Cost this month</h2>
    <table id="costs" hidden>
      <thead><tr><th>Account</th><th>GPU-hours</th><th>USD</th></tr></thead>
      <tbody></tbody>
    </table>
    <p id="costs-none" class="muted" hidden>No cost this month (it is counted with the stack&#39;s accounting).</p>
  </section>
</main>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
const MODE_LABELS = {"gpu": "GPU", "cpu-fallback": "CPU fallback"};

function show(id, visible) { $(id).hidden = !visible; }

function notice(kind, text) {
  const box = $("notice");
  box.className = "notice " + kind;
  box.textContent = text;
  box.hidden = !text;
}

function row(cells) {
  const tr = document.createElement("tr");
  for (const cell of cells) {
    const td = document.createElement("td");
    td.textContent = String(cell);
    tr.appendChild(td);
  }
  return tr;
}

async function loadInfo() {
  try {
    const info = await (await fetch("/api/info")).json();
    const command = info.job_command.join(" ");
    $("about").textContent = info.gpu_unavailable_reason
      ? "No GPU here (" + info.gpu_unavailable_reason + "): Run does a CPU fallback job instead of " + command + "."
      : "Run executes " + command + " on this container's GPU.";
    $("about").textContent += " At most " + info.max_concurrent_jobs + " jobs at once, each stopped after "
      + info.job_timeout_s + " s.";
    if (!info.run_allowed) {
      $("run").disabled = true;
      notice("error", "Your address may not run jobs here.");
    }
  } catch (error) {
    $("about").textContent = "The app did not answer: " + error;
  }
}

function showResult(body) {
  const mode = $("mode");
  mode.textContent = MODE_LABELS[body.mode] || body.mode;
  mode.className = "badge " + body.mode;
  $("device").textContent = body.device;
  $("duration").textContent = body.seconds.toFixed(3) + " s";
  $("returncode").textContent = String(body.returncode);
  $("reason").textContent = body.reason || "";
  show("reason", Boolean(body.reason));
  show("reason-label", Boolean(body.reason));
  $("output").textContent = body.output;  // text, never markup
  show("result", true);
}

async function run() {
  $("run").disabled = true;
  show("running", true);
  notice("", "");
  try {
    const response = await fetch("/api/run", {method: "POST", body: ""});
    let body = {};
    try { body = await response.json(); } catch (error) { body = {error: "HTTP " + response.status}; }
    if (response.status === 503) {
      const text = body.error || "busy: all job slots are taken";
      notice("busy", text.charAt(0).toUpperCase() + text.slice(1) + ". Try again in a moment.");
    } else if (body.output !== undefined) {
      showResult(body);
      if (response.status !== 200) notice("error", "The job failed (exit code " + body.returncode + ").");
    } else {
      notice("error", "Error " + response.status + ": " + (body.error || "unexpected answer"));
    }
  } catch (error) {
    notice("error", "The app could not be reached: " + error);
  } finally {
    show("running", false);
    $("run").disabled = false;
  }
}

async function loadCluster() {
  let snap;
  try {
    snap = await (await fetch("/api/cluster")).json();
  } catch (error) {
    $("snapshot-age").textContent = "Cluster snapshot not reachable: " + error;
    return;
  }
  if (!snap.available) {
    $("snapshot-age").textContent = snap.error;
    show("nodes", false);
    return;
  }
  $("snapshot-age").textContent = "Snapshot of cluster " + snap.cluster + ", " + snap.age_s + " s old"
    + (snap.stale ? " (STALE: the controller side stopped writing it)" : "")
    + (snap.error ? "; Slurm said: " + snap.error : "");
  const nodes = $("nodes").tBodies[0];
  nodes.replaceChildren(...snap.nodes.map((n) => row([n.name, n.state, n.gpus_used + " / " + n.gpus_total])));
  show("nodes", true);
  const used = snap.nodes.reduce((sum, n) => sum + n.gpus_used, 0);
  const total = snap.nodes.reduce((sum, n) => sum + n.gpus_total, 0);
  $("gpus").textContent = "GPUs: " + (total - used) + " free, " + used + " used, " + total + " in all";
  show("gpus", true);
  $("jobs-summary").textContent = snap.jobs.running + " running, " + snap.jobs.pending + " queued";
  const jobs = $("jobs").tBodies[0];
  jobs.replaceChildren(...snap.jobs.list.map((j) => row([j.id, j.state, j.name, j.gres])));
  show("jobs", snap.jobs.list.length > 0);
}

const SVG = $("gpu-chart").namespaceURI;  // the inline <svg>'s: SVG's namespace
const CHART = {width: 640, height: 180, left: 40, right: 10, top: 10, bottom: 24};

function svg(name, attributes, text) {
  const element = document.createElementNS(SVG, name);
  for (const [key, value] of Object.entries(attributes)) element.setAttribute(key, String(value));
  if (text !== undefined) element.textContent = text;
  return element;
}

// A step line through [time, value] points: a value holds until the next sample.
function steps(points, x, y) {
  return points.map(([t, v], i) => (i ? x(t) + "," + y(points[i - 1][1]) + " " : "") + x(t) + "," + y(v)).join(" ");
}

function drawChart(m) {
  const chart = $("gpu-chart");
  const w = CHART.width - CHART.left - CHART.right, h = CHART.height - CHART.top - CHART.bottom;
  const top = Math.max(1, ...m.total.map((p) => p[1]), ...m.allocated.map((p) => p[1]));
  const x = (t) => (CHART.left + (t - m.start) / (m.end - m.start) * w).toFixed(1);
  const y = (v) => (CHART.top + h - v / top * h).toFixed(1);
  const parts = [];
  for (const v of [0, top / 2, top]) {
    parts.push(svg("line", {class: "grid", x1: CHART.left, x2: CHART.left + w, y1: y(v), y2: y(v)}));
    parts.push(svg("text", {x: CHART.left - 6, y: Number(y(v)) + 4, "text-anchor": "end"}, String(+v.toFixed(1))));
  }
  parts.push(svg("line", {class: "axis", x1: CHART.left, x2: CHART.left + w, y1: y(0), y2: y(0)}));
  for (const [minutes, anchor] of [[60, "start"], [30, "middle"], [0, "end"]]) {
    const label = minutes ? "-" + minutes + " min" : "now";
    parts.push(svg("text", {x: x(m.end - minutes * 60), y: CHART.height - 6, "text-anchor": anchor}, label));
  }
  if (m.total.length) parts.push(svg("polyline", {class: "total", points: steps(m.total, x, y)}));
  if (m.allocated.length) {
    const line = steps(m.allocated, x, y);
    const first = m.allocated[0][0], last = m.allocated[m.allocated.length - 1][0];
    const area = x(first) + "," + y(0) + " " + line + " " + x(last) + "," + y(0);
    parts.push(svg("polygon", {class: "allocated", points: area}));
  }
  chart.replaceChildren(...parts);
  chart.removeAttribute("hidden");  // an SVG element has no `hidden` property, only the attribute
}

async function loadMetrics() {
  let m;
  try {
    m = await (await fetch("/api/metrics")).json();
  } catch (error) {
    $("metrics-state").textContent = "Metrics not reachable: " + error;
    return;
  }
  if (!m.available) {
    $("metrics-state").textContent = m.error;
    return;
  }
  $("metrics-state").textContent = "From the cluster's Prometheus; dashed: GPUs in all.";
  drawChart(m);
  const now = m.allocated.length ? m.allocated[m.allocated.length - 1][1] : 0;
  const total = m.total.length ? m.total[m.total.length - 1][1] : 0;
  $("gpu-now").textContent = "Now: " + now + " of " + total + " GPUs allocated";
  show("gpu-now", true);
  const costs = $("costs").tBodies[0];
  costs.replaceChildren(...m.accounts.map((a) => row([a.account, a.gpu_hours.toFixed(4), "$" + a.usd.toFixed(4)])));
  show("costs", m.accounts.length > 0);
  show("costs-none", m.accounts.length === 0);
}

$("run").addEventListener("click", run);
loadInfo();
loadCluster();
loadMetrics();
setInterval(loadCluster, 3000);
setInterval(loadMetrics, 15000);
</script>
</body>
</html>
"""


if __name__ == "__main__":
    main()
