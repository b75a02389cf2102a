"""The cluster's own Prometheus exporter: Slurm's nodes, jobs and GPUs, this month's GPU-seconds
and cost per account, and the GPU devices of the host it runs on.

Runs on the controller's host as root, without new privileges: its Slurm commands are the host's
client wrappers, which attach to the cluster's container (lxc-attach takes root). Python
standard library, with its two sibling modules (copies of the program's components/slurm/slurm_text.py and
components/metrics/cost_arithmetic.py, so the status command and the metrics read Slurm and price GPUs alike).
`GET /metrics` asks Slurm at each scrape (`scontrol -o show node|job`; sacct at most every
`sacct_interval_s`). Usage: slurm_exporter.py SETTINGS_JSON, with
  listen_address, port   where it listens (the host's address on the cluster's NAT bridge)
  prices                 node -> USD per GPU-hour (the hosts' prices, rendered by the program)
  gpus                   node -> GPU device paths, for this host's nodes (presence is checked here)
  accounting             whether sacct has jobs (slurmdbd); without it, no per-account figures
  sacct_interval_s       how long sacct's answer is reused
"""

import json
import os
import shutil
import stat
import subprocess
import sys
import threading
import time
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cost_arithmetic
import slurm_text

NVIDIA_MAJOR = 195
COMMAND_TIMEOUT_S = 20
HEALTH_TAG = "gpu-health:"  # the reason the GPU health check drains a node with
SMI_FIELDS = ("index", "name", "utilization.gpu", "memory.used", "memory.total", "temperature.gpu")


def run_command(argv: list[str]) -> tuple[int, str]:
    """A command's exit status and output. A Slurm command (named, not a path) is the cluster's
    client in SLURM_BIN (its node image's, run in its container), never a Slurm the host may have."""
    if "/" not in argv[0]:
        argv = [os.path.join(os.environ.get("SLURM_BIN", ""), argv[0]), *argv[1:]]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return 1, str(error)
    return done.returncode, done.stdout if done.returncode == 0 else done.stderr


def _label(value) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class Metrics:
    """Prometheus's text format, one family after another."""

    def __init__(self):
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str, samples) -> None:
        self.lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        for labels, value in samples:
            text = ",".join(f'{key}="{_label(val)}"' for key, val in labels.items())
            self.lines.append(f"{name}{{{text}}} {value}" if text else f"{name} {value}")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def base_state(state: str) -> str:
    """IDLE+DRAIN -> idle, DOWN*+DRAIN -> down, MIXED -> mixed (flags and suffixes dropped)."""
    return state.split("+")[0].rstrip("*~#!%$@^-").lower() or "unknown"


def node_down(state: str) -> bool:
    """DOWN, or not responding (Slurm's '*' suffix)."""
    return base_state(state) == "down" or "*" in state


def submit_time(record: dict[str, str]) -> float | None:
    try:
        return time.mktime(time.strptime(record.get("SubmitTime", ""), "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


def is_gpu_device(path: str) -> bool:
    """A character device with NVIDIA's major number (a stand-in is one too)."""
    try:
        info = os.stat(path)
    except OSError:
        return False
    return stat.S_ISCHR(info.st_mode) and os.major(info.st_rdev) == NVIDIA_MAJOR


def nvidia_smi_rows(run) -> list[dict[str, str]] | None:
    """What nvidia-smi says per GPU on this host, or None where it is not installed."""
    smi = shutil.which("nvidia-smi")
    if not smi or not os.path.isfile(smi):
        return None
    code, out = run([smi, f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader,nounits"])
    if code != 0:
        return []
    rows = []
    for line in out.splitlines():
        values = [value.strip() for value in line.split(",")]
        if len(values) == len(SMI_FIELDS):
            rows.append(dict(zip(SMI_FIELDS, values, strict=True)))
    return rows


class SacctCache:
    """sacct's per-account figures, reused for `interval_s` (sacct is the costliest call)."""

    def __init__(self, interval_s: float):
        self.interval_s, self.at, self.value = interval_s, None, None
        self.lock = threading.Lock()

    def get(self, run, now: float):
        with self.lock:
            if self.at is None or now - self.at >= self.interval_s:
                self.value, self.at = self._ask(run, now), now
            return self.value

    @staticmethod
    def _ask(run, now: float):
        code, out = run(slurm_text.sacct_since(slurm_text.month_start(now)))
        return slurm_text.sacct_records(out) if code == 0 else None


def collect(
    settings: dict,
    run=run_command,
    now: float | None = None,
    sacct: SacctCache | None = None,
    device_check=is_gpu_device,
    smi=nvidia_smi_rows,
) -> str:
    """The exposition text of one scrape."""
    now = time.time() if now is None else now
    metrics = Metrics()
    node_code, node_out = run(["scontrol", "-o", "show", "node"])
    job_code, job_out = run(["scontrol", "-o", "show", "job"])
    answered = node_code == 0
    metrics.family("gpucluster_slurm_up", "gauge", "whether slurmctld answered", [({}, int(answered))])

    nodes = slurm_text.nodes(node_out) if answered else []
    records = slurm_text.scontrol_records(job_out) if job_code == 0 else []
    jobs = slurm_text.jobs(job_out) if job_code == 0 else []
    running = [job for job in jobs if job.state == "RUNNING"]
    for node in nodes:
        if node.gpus_allocated is None:
            node.gpus_allocated = slurm_text.allocated_from_jobs(node.name, running)

    node_families(metrics, nodes)
    partition_families(metrics, nodes, jobs, records, now)
    gpu_families(metrics, settings, run, device_check, smi)
    prices = {node: Decimal(str(price)) for node, price in settings.get("prices", {}).items()}
    metrics.family(
        "gpucluster_gpu_hour_price_usd",
        "gauge",
        "USD per GPU-hour of the node (its host's price)",
        [({"node": node}, float(price)) for node, price in sorted(prices.items())],
    )
    if settings.get("accounting") and answered:
        sacct = sacct or SacctCache(float(settings.get("sacct_interval_s", 60)))
        account_families(metrics, sacct.get(run, now), prices)
    return metrics.text()


def node_families(metrics: Metrics, nodes: list) -> None:
    """Each node's state, drain, health and GPUs, and the nodes counted by state."""
    metrics.family(
        "gpucluster_node_state",
        "gauge",
        "1 for each node's Slurm state (flags such as DRAIN apart)",
        [({"node": n.name, "state": base_state(n.state)}, 1) for n in nodes],
    )
    metrics.family(
        "gpucluster_nodes",
        "gauge",
        "nodes by Slurm state",
        [
            ({"state": state}, sum(1 for n in nodes if base_state(n.state) == state))
            for state in sorted({base_state(n.state) for n in nodes})
        ],
    )
    metrics.family(
        "gpucluster_node_down",
        "gauge",
        "1 where Slurm says the node is down or not responding",
        [({"node": n.name}, int(node_down(n.state))) for n in nodes],
    )
    metrics.family(
        "gpucluster_node_drained",
        "gauge",
        "1 where the node is drained or draining, with its reason",
        [({"node": n.name, "reason": n.reason if n.drained else ""}, int(n.drained)) for n in nodes],
    )
    metrics.family(
        "gpucluster_gpu_health_failing",
        "gauge",
        "1 where the GPU health check drained the node (reason gpu-health: ...)",
        [({"node": n.name}, int(n.drained and n.reason.startswith(HEALTH_TAG))) for n in nodes],
    )
    metrics.family(
        "gpucluster_node_gpus",
        "gauge",
        "GPUs Slurm counts on the node (GRES)",
        [({"node": n.name}, n.gpus) for n in nodes],
    )
    metrics.family(
        "gpucluster_node_gpus_allocated",
        "gauge",
        "GPUs allocated to jobs on the node",
        [({"node": n.name}, n.gpus_allocated) for n in nodes],
    )


def partition_families(metrics: Metrics, nodes: list, jobs: list, records: list[dict], now: float) -> None:
    """Each partition's GPUs, allocated GPUs, jobs by state and longest pending wait."""
    partitions = sorted({p for n in nodes for p in n.partitions} | {job.partition for job in jobs if job.partition})
    metrics.family(
        "gpucluster_partition_gpus",
        "gauge",
        "GPUs of the partition's nodes",
        [({"partition": p}, sum(n.gpus for n in nodes if p in n.partitions)) for p in partitions],
    )
    metrics.family(
        "gpucluster_partition_gpus_allocated",
        "gauge",
        "GPUs allocated on the partition's nodes",
        [({"partition": p}, sum(n.gpus_allocated for n in nodes if p in n.partitions)) for p in partitions],
    )
    states = sorted({"RUNNING", "PENDING"} | {job.state for job in jobs})
    metrics.family(
        "gpucluster_jobs",
        "gauge",
        "jobs Slurm knows (finished ones for a few minutes) by state and partition",
        [
            ({"state": s.lower(), "partition": p}, sum(1 for j in jobs if j.state == s and j.partition == p))
            for p in partitions
            for s in states
        ],
    )
    waited: dict[str, float] = {p: 0.0 for p in partitions}
    for record in records:
        submitted = submit_time(record)
        if record.get("JobState") == "PENDING" and submitted is not None:
            partition = record.get("Partition", "")
            waited[partition] = max(waited.get(partition, 0.0), now - submitted)
    metrics.family(
        "gpucluster_pending_longest_seconds",
        "gauge",
        "how long the partition's longest-waiting pending job has waited (0: none waits)",
        [({"partition": p}, round(max(w, 0.0), 1)) for p, w in sorted(waited.items())],
    )


def gpu_families(metrics: Metrics, settings: dict, run, device_check, smi) -> None:
    """The nodes' GPU devices on this host, and what nvidia-smi reports where it runs."""
    gpus = settings.get("gpus", {})
    metrics.family(
        "gpucluster_gpu_present",
        "gauge",
        "1 where the node's GPU device is a character device with NVIDIA's major number on this host",
        [({"node": node, "device": path}, int(device_check(path))) for node in sorted(gpus) for path in gpus[node]],
    )
    rows = smi(run)
    if rows is None:
        return
    for field, name, help_text in (
        ("utilization.gpu", "gpucluster_nvidia_gpu_utilization_percent", "GPU utilization (nvidia-smi)"),
        ("memory.used", "gpucluster_nvidia_gpu_memory_used_mib", "GPU memory in use, MiB (nvidia-smi)"),
        ("memory.total", "gpucluster_nvidia_gpu_memory_total_mib", "GPU memory, MiB (nvidia-smi)"),
        ("temperature.gpu", "gpucluster_nvidia_gpu_temperature_celsius", "GPU temperature (nvidia-smi)"),
    ):
        samples = [
            ({"index": row["index"], "name": row["name"]}, row[field])
            for row in rows
            if row[field].replace(".", "", 1).isdigit()
        ]
        metrics.family(name, "gauge", help_text, samples)
    metrics.family("gpucluster_nvidia_smi_gpus", "gauge", "GPUs nvidia-smi lists on this host", [({}, len(rows))])


def account_families(metrics: Metrics, found: list | None, prices: dict[str, Decimal]) -> None:
    """Whether sacct answered, and this month's jobs, GPU-seconds and cost per account."""
    metrics.family("gpucluster_sacct_up", "gauge", "whether sacct answered", [({}, int(found is not None))])
    if found is None:
        return
    started = [r for r in found if r.state != "PENDING"]
    accounts = cost_arithmetic.per_account(((r.account, r.elapsed_seconds, r.gpus, r.nodes) for r in started), prices)
    gpu_seconds = {a: 0 for a in (entry.account for entry in accounts)}
    for r in started:
        gpu_seconds[r.account] += r.elapsed_seconds * r.gpus
    metrics.family(
        "gpucluster_account_jobs_month",
        "gauge",
        "jobs started this month, per account",
        [({"account": a.account}, a.jobs) for a in accounts],
    )
    metrics.family(
        "gpucluster_account_gpu_seconds_month",
        "gauge",
        "GPU-seconds (elapsed x GPUs) this month, per account",
        [({"account": a.account}, gpu_seconds[a.account]) for a in accounts],
    )
    metrics.family(
        "gpucluster_account_cost_usd_month",
        "gauge",
        "GPU-seconds x the hosts' price this month, per account",
        [({"account": a.account}, float(round(a.usd, 6))) for a in accounts],
    )


class CollectionCache:
    """One collection at a time, its text reused for `fresh_s`: every container (every job)
    reaches the exporter, and each collection runs two scontrol calls on the controller's
    host; concurrent requests wait for the one collection in progress and share its text."""

    def __init__(
        self, settings: dict, sacct: SacctCache, fresh_s: float = 5.0, collect_text=None, clock=time.monotonic
    ):
        self.settings, self.sacct, self.fresh_s, self.clock = settings, sacct, fresh_s, clock
        self.collect_text = collect_text or (lambda: collect(self.settings, sacct=self.sacct))
        self.lock = threading.Lock()
        self.text: str | None = None
        self.at = 0.0

    def get(self) -> str:
        with self.lock:
            if self.text is None or self.clock() - self.at >= self.fresh_s:
                self.text, self.at = self.collect_text(), self.clock()
            return self.text


def make_handler(settings: dict, sacct: SacctCache, cache: CollectionCache | None = None):
    cache = cache or CollectionCache(settings, sacct)

    class Handler(BaseHTTPRequestHandler):
        server_version = "gpucluster-exporter"
        timeout = 10  # a client that sends nothing is dropped, its thread freed

        def do_GET(self):
            if self.path == "/metrics":
                body, kind, status = cache.get().encode(), "text/plain; version=0.0.4", 200
            elif self.path == "/":
                body, kind, status = b"gpucluster exporter: /metrics\n", "text/plain", 200
            else:
                body, kind, status = b"not found\n", "text/plain", 404
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format, *args):  # noqa: A002 (http.server's signature)
            pass

    return Handler


class BoundedServer(ThreadingHTTPServer):
    """At most MAX_OPEN connections served at once; the ones beyond are closed at once."""

    daemon_threads = True
    MAX_OPEN = 16

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.slots = threading.BoundedSemaphore(self.MAX_OPEN)

    def process_request(self, request, client_address):
        if not self.slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


def main() -> None:
    settings = json.loads(Path(sys.argv[1]).read_text())
    sacct = SacctCache(float(settings.get("sacct_interval_s", 60)))
    server = BoundedServer((settings["listen_address"], int(settings["port"])), make_handler(settings, sacct))
    print(f"listening on {settings['listen_address']}:{settings['port']}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
