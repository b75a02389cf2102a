"""The cluster's Slurm and GPU exporter without a cluster: Slurm 22.05's outputs from fixtures
(tests/status_fixtures/, as the status command reads them), run the way the host runs it (the
exporter beside its copies of components/slurm/slurm_text.py and components/metrics/cost_arithmetic.py)."""

import importlib.util
import json
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from decimal import Decimal
from pathlib import Path

import pytest

from components.metrics.prometheus import EXPORTER_SOURCES
from ops.cost import job_cost

FIXTURES = Path(__file__).resolve().parents[1] / "status_fixtures"
SAMPLE = re.compile(r'^([a-z_:][a-z0-9_:]*)(?:\{((?:[a-z_]+="(?:[^"\\]|\\.)*",?)*)\})? (-?[0-9.e+]+)$')
LABEL = re.compile(r'([a-z_]+)="((?:[^"\\]|\\.)*)"')
# The fixtures' pending job (5) was submitted at 2026-11-23T12:39:02 local time.
SUBMITTED = time.mktime(time.strptime("2026-11-23T12:39:02", "%Y-%m-%dT%H:%M:%S"))
SETTINGS = {
    "listen_address": "127.0.0.1",
    "prices": {"c000": "3.6", "c001": "3.6"},
    "gpus": {"c000": ["/run/gpucluster-e2e-dev/nvidia0"], "c001": ["/run/gpucluster-e2e-dev/nvidia1"]},
    "accounting": True,
    "sacct_interval_s": 60,
}


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def install(directory: Path) -> Path:
    """The exporter's files as exporter_create.sh writes them on the host."""
    names = {
        "EXPORTER_SOURCE": "slurm_exporter.py",
        "SLURM_TEXT_SOURCE": "slurm_text.py",
        "COST_SOURCE": "cost_arithmetic.py",
    }
    for key, path in EXPORTER_SOURCES.items():
        shutil.copy(path, directory / names[key])
    return directory / "slurm_exporter.py"


@pytest.fixture
def exporter(tmp_path, monkeypatch):
    program = install(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = importlib.util.spec_from_file_location("slurm_exporter_under_test", program)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def slurm(node_text: str | None = None, job_text: str | None = None, sacct_text: str | None = None):
    """A stand-in for the Slurm commands: fixture outputs (None: the command fails)."""
    calls = []

    def run(argv):
        calls.append(argv)
        text = {"node": node_text, "job": job_text}.get(argv[-1]) if argv[0] == "scontrol" else sacct_text
        return (0, text) if text is not None else (1, "slurm_load_node error: Unable to contact slurm controller")

    run.calls = calls
    return run


def parse(text: str) -> dict[tuple[str, frozenset], float]:
    """Prometheus's text format: every sample line well formed, each family with HELP and TYPE."""
    samples, declared = {}, set()
    for line in text.splitlines():
        if line.startswith("# "):
            kind, name = line.split()[1:3]
            declared.add((kind, name))
            continue
        found = SAMPLE.match(line)
        assert found, f"not a sample line: {line!r}"
        name, labels, value = found.groups()
        assert {("HELP", name), ("TYPE", name)} <= declared, name
        key = (name, frozenset(LABEL.findall(labels or "")))
        assert key not in samples, f"sample twice: {line}"
        samples[key] = float(value)
    return samples


def value(samples: dict, metric: str, **labels) -> float:
    return samples[(metric, frozenset(labels.items()))]


def test_nodes_jobs_gpus_and_cost_per_account_from_slurm_fixtures(exporter):
    run = slurm(fixture("scontrol_show_node.txt"), fixture("scontrol_show_job.txt"), fixture("sacct.txt"))
    now = SUBMITTED + 125
    text = exporter.collect(
        SETTINGS, run, now=now, device_check=lambda path: path.endswith("nvidia0"), smi=lambda r: None
    )
    samples = parse(text)
    assert value(samples, "gpucluster_slurm_up") == 1
    assert value(samples, "gpucluster_node_state", node="c000", state="mixed") == 1
    assert value(samples, "gpucluster_node_state", node="c001", state="idle") == 1
    assert (
        value(samples, "gpucluster_nodes", state="idle") == 1 and value(samples, "gpucluster_nodes", state="mixed") == 1
    )
    assert value(samples, "gpucluster_node_drained", node="c000", reason="") == 0
    drained = value(
        samples, "gpucluster_node_drained", node="c001", reason="status e2e check [root@2026-11-23T12:39:05]"
    )
    assert drained == 1
    assert value(samples, "gpucluster_node_down", node="c001") == 0
    assert value(samples, "gpucluster_gpu_health_failing", node="c001") == 0  # drained by hand, not by the check
    assert value(samples, "gpucluster_node_gpus", node="c000") == 1
    assert value(samples, "gpucluster_node_gpus_allocated", node="c000") == 1
    assert value(samples, "gpucluster_node_gpus_allocated", node="c001") == 0
    assert value(samples, "gpucluster_partition_gpus", partition="tutorial") == 2
    assert value(samples, "gpucluster_partition_gpus_allocated", partition="tutorial") == 1
    assert value(samples, "gpucluster_jobs", state="running", partition="tutorial") == 1
    assert value(samples, "gpucluster_jobs", state="pending", partition="tutorial") == 1
    assert value(samples, "gpucluster_jobs", state="completed", partition="tutorial") >= 1
    assert value(samples, "gpucluster_pending_longest_seconds", partition="tutorial") == 125
    assert value(samples, "gpucluster_gpu_present", node="c000", device="/run/gpucluster-e2e-dev/nvidia0") == 1
    assert value(samples, "gpucluster_gpu_present", node="c001", device="/run/gpucluster-e2e-dev/nvidia1") == 0
    assert value(samples, "gpucluster_gpu_hour_price_usd", node="c000") == 3.6
    # sacct: physics ran 3 s on 1 GPU at $3.6/GPU-hour, chem's running job 4 s so far; the
    # pending one has not started. The cost is the status command's arithmetic.
    assert value(samples, "gpucluster_account_gpu_seconds_month", account="physics") == 3
    assert value(samples, "gpucluster_account_gpu_seconds_month", account="chem") == 4
    assert value(samples, "gpucluster_account_jobs_month", account="chem") == 1
    physics = value(samples, "gpucluster_account_cost_usd_month", account="physics")
    assert Decimal(str(physics)) == job_cost(3, 1, Decimal("3.6")) == Decimal("0.003")
    assert value(samples, "gpucluster_account_cost_usd_month", account="chem") == 0.004
    assert value(samples, "gpucluster_sacct_up") == 1
    sacct = next(argv for argv in run.calls if argv[0] == "sacct")
    assert sacct[-1] == "--format=JobID,User,Account,State,ElapsedRaw,AllocTRES,NodeList"
    assert sacct[sacct.index("-S") + 1] == time.strftime("%Y-%m-01T00:00:00", time.localtime(now))


def test_sacct_is_asked_at_most_once_per_interval(exporter):
    run = slurm(fixture("scontrol_show_node.txt"), fixture("scontrol_show_job.txt"), fixture("sacct.txt"))
    cache = exporter.SacctCache(60)
    for now in (1000, 1030, 1059):
        exporter.collect(SETTINGS, run, now=now, sacct=cache, smi=lambda r: None)
    assert sum(argv[0] == "sacct" for argv in run.calls) == 1
    exporter.collect(SETTINGS, run, now=1060, sacct=cache, smi=lambda r: None)
    assert sum(argv[0] == "sacct" for argv in run.calls) == 2


def test_without_accounting_no_account_figures(exporter):
    run = slurm(fixture("scontrol_show_node.txt"), fixture("scontrol_show_job.txt"))
    samples = parse(exporter.collect({**SETTINGS, "accounting": False}, run, smi=lambda r: None))
    assert not [key for key in samples if key[0].startswith(("gpucluster_account_", "gpucluster_sacct_"))]
    assert all(argv[0] != "sacct" for argv in run.calls)


def test_slurm_not_answering_says_so_and_nothing_else_of_slurm(exporter):
    samples = parse(exporter.collect(SETTINGS, slurm(), device_check=lambda path: True, smi=lambda r: None))
    assert value(samples, "gpucluster_slurm_up") == 0
    assert not [key for key in samples if key[0].startswith(("gpucluster_node_", "gpucluster_account_"))]
    assert value(samples, "gpucluster_gpu_present", node="c000", device="/run/gpucluster-e2e-dev/nvidia0") == 1


def test_a_node_the_gpu_health_check_drained_and_a_node_not_responding(exporter):
    nodes = fixture("scontrol_show_node.txt").replace(
        "Reason=status e2e check [root@2026-11-23T12:39:05]", "Reason=gpu-health: /dev/nvidia1 missing [root@x]"
    )
    nodes = nodes.replace("State=MIXED", "State=DOWN*+DRAIN")
    samples = parse(exporter.collect(SETTINGS, slurm(nodes, fixture("scontrol_show_job.txt")), smi=lambda r: None))
    assert value(samples, "gpucluster_gpu_health_failing", node="c001") == 1
    assert value(samples, "gpucluster_node_down", node="c000") == 1
    assert value(samples, "gpucluster_node_state", node="c000", state="down") == 1


def test_nvidia_smi_figures_where_it_exists(exporter):
    rows = [
        {
            "index": "0",
            "name": "NVIDIA A10G",
            "utilization.gpu": "87",
            "memory.used": "1024",
            "memory.total": "23028",
            "temperature.gpu": "[N/A]",
        }
    ]
    samples = parse(exporter.collect(SETTINGS, slurm(), smi=lambda r: rows))
    assert value(samples, "gpucluster_nvidia_smi_gpus") == 1
    assert value(samples, "gpucluster_nvidia_gpu_utilization_percent", index="0", name="NVIDIA A10G") == 87
    assert value(samples, "gpucluster_nvidia_gpu_memory_total_mib", index="0", name="NVIDIA A10G") == 23028
    assert not [key for key in samples if key[0] == "gpucluster_nvidia_gpu_temperature_celsius"]


def test_label_values_are_escaped(exporter):
    nodes = fixture("scontrol_show_node.txt").replace("status e2e check", 'a "quoted" \\ reason')
    text = exporter.collect(SETTINGS, slurm(nodes, ""), smi=lambda r: None)
    assert 'reason="a \\"quoted\\" \\\\ reason [root@2026-11-23T12:39:05]"' in text
    parse(text)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_the_exporter_serves_metrics_over_http_from_the_slurm_commands(tmp_path):
    """Run as the host runs it: its own directory, Slurm's commands on PATH (here stand-ins)."""
    directory = tmp_path / "metrics"
    directory.mkdir()
    program = install(directory)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in {
        "scontrol": f'cat "{FIXTURES}/scontrol_show_$3.txt"',  # scontrol -o show node|job
        "sacct": f"cat {FIXTURES}/sacct.txt",
    }.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    port = free_port()
    settings = tmp_path / "exporter.json"
    settings.write_text(json.dumps({**SETTINGS, "port": port}))
    process = subprocess.Popen(
        [sys.executable, str(program), str(settings)], env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, cwd="/"
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
                    kind, text = response.headers["Content-Type"], response.read().decode()
                break
            except OSError:
                assert time.monotonic() < deadline and process.poll() is None, "the exporter did not answer"
                time.sleep(0.05)
    finally:
        process.kill()
        process.wait()
    assert kind.startswith("text/plain; version=0.0.4")
    samples = parse(text)
    assert value(samples, "gpucluster_node_gpus_allocated", node="c000") == 1
    assert value(samples, "gpucluster_account_gpu_seconds_month", account="physics") == 3


def test_concurrent_scrapes_share_one_collection_reused_for_a_few_seconds(exporter):
    """N13: every job reaches the exporter; each request ran two scontrol calls."""
    import threading

    collections = []

    def slow_collection():
        collections.append(1)
        time.sleep(0.3)
        return f"collection {len(collections)}\n"

    clock = [100.0]
    cache = exporter.CollectionCache({}, None, fresh_s=5, collect_text=slow_collection, clock=lambda: clock[0])
    answers = []
    threads = [threading.Thread(target=lambda: answers.append(cache.get())) for _ in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert answers == ["collection 1\n"] * 12 and len(collections) == 1
    clock[0] += 4.9
    assert cache.get() == "collection 1\n"
    clock[0] += 0.2
    assert cache.get() == "collection 2\n"


def test_connections_beyond_the_limit_are_closed_at_once(exporter, monkeypatch):
    monkeypatch.setattr(exporter.BoundedServer, "MAX_OPEN", 2)
    cache = exporter.CollectionCache({}, None, collect_text=lambda: "up 1\n")
    server = exporter.BoundedServer(("127.0.0.1", 0), exporter.make_handler({}, None, cache))
    import threading

    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(2)]  # they send nothing
    try:
        time.sleep(0.3)
        with socket.create_connection(("127.0.0.1", port)) as third:
            third.settimeout(5)
            third.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            assert third.recv(100) == b""  # closed, unanswered
        for connection in idle:
            connection.close()
        time.sleep(0.3)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            assert response.read() == b"up 1\n"  # the slots are free again
    finally:
        server.shutdown()
        server.server_close()
