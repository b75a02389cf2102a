"""End-to-end: the metrics on a real cluster (the `e2e` stack's metrics variant: two nodes with
one stand-in GPU each, the web app, Prometheus in its container scraping every 5 s, rules
evaluated every 2 s that fire at once). Prometheus's HTTP API says 1 GPU allocated while a GPU
job runs and 0 after it; a node drained by hand makes the NodeDrained alert fire; the web
page draws the last hour's allocation from Prometheus (a Chromium screenshot is kept);
Prometheus and the exporters listen on cluster addresses only. Everything is removed in `finally`."""

import json
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.app.e2e_web_page import ARTIFACTS
from tests.harness.browser import Browser
from tests.harness.e2e_teardown import METRICS, STACK, metrics_config, teardown
from tests.harness.engine_cluster import CommandFailedError, State, destroy_state, host_commands, up
from tests.harness.program_harness import run_program
from tests.harness.slurm_client import wait_for
from tests.test_e2e import CONNECT, leftovers, require_host, sh, slurm_env

pytestmark = pytest.mark.e2e

CLUSTER = "e2e"
PROMETHEUS = f"http://{METRICS['nat_address']}:9090"
EXPORTER = "10.43.3.1:9481"  # the NAT bridge's address on the host
DRAIN_REASON = "metrics e2e check"
SLURM = slurm_env(CLUSTER)


def prometheus(path: str, **params) -> dict:
    url = f"{PROMETHEUS}{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def allocated_gpus() -> float | None:
    """Prometheus's answer to sum(gpucluster_node_gpus_allocated), None before a sample."""
    result = prometheus("/api/v1/query", query="sum(gpucluster_node_gpus_allocated)")["data"]["result"]
    return float(result[0]["value"][1]) if result else None


def firing(alert: str) -> list[dict]:
    return [a for a in prometheus("/api/v1/alerts")["data"]["alerts"] if a["labels"]["alertname"] == alert]


def exporter_answers() -> bool:
    try:
        with urllib.request.urlopen(f"http://{EXPORTER}/metrics", timeout=10) as response:
            return b"gpucluster_slurm_up 1" in response.read()
    except OSError:
        return False


def connects_from(container: str) -> str:
    host, port = EXPORTER.split(":")
    return sh("lxc-attach", "-n", container, "--", "python3", "-c", CONNECT, host, port).stdout.strip()


def listening(argv: list[str], port: int) -> list[str]:
    """The local addresses listening on `port` (ss in the host or a container)."""
    out = sh(*argv, "ss", "-Htln", f"sport = :{port}").stdout
    return sorted(line.split()[3] for line in out.splitlines() if line.strip())


def test_prometheus_counts_gpus_fires_the_drain_alert_and_feeds_the_page(capsys):
    require_host()
    teardown()
    report: list[str] = []
    state = State()
    config = metrics_config()
    browser = None
    job = ""
    try:
        started = time.monotonic()
        up(state, host_commands(run_program(config, stack=STACK)))
        report.append(f"bring-up: {time.monotonic() - started:.0f} s")

        # Cluster addresses only: Prometheus on its container's, the exporters on the bridge's
        # host address and each node's NAT address.
        assert listening(["lxc-attach", "-n", f"{CLUSTER}-metrics", "--"], 9090) == [f"{METRICS['nat_address']}:9090"]
        assert listening([], 9481) == [EXPORTER]
        assert listening(["lxc-attach", "-n", f"{CLUSTER}-c001", "--"], 9100) == ["10.43.3.3:9100"]
        wait_for(
            "every target up",
            lambda: {t["health"] for t in prometheus("/api/v1/targets")["data"]["activeTargets"]} == {"up"},
            30,
        )
        targets = prometheus("/api/v1/targets")["data"]["activeTargets"]
        assert len(targets) == 4  # Prometheus itself, the cluster exporter, c000's and c001's node exporters
        report.append("targets: " + ", ".join(sorted(f"{t['labels']['job']} {t['scrapeUrl']}" for t in targets)))
        wait_for("a first sample of 0 GPUs allocated", lambda: allocated_gpus() == 0, 30)

        # The exporter's guard: a job in a node is refused at the exporter, which Prometheus
        # (its targets are up, above) and the host still reach.
        assert connects_from(f"{CLUSTER}-c001") == "refused"
        assert connects_from(f"{CLUSTER}-metrics") == "open" and exporter_answers()
        report.append(f"exporter {EXPORTER}: from c001 refused, from the metrics container and the host open")

        job = sh(
            "sbatch", "--parsable", "--chdir=/tmp", "-J", "metrics-gpu", "-w", "c000", "--gres=gpu:1",
            "--wrap", "sleep 300", env=SLURM,
        ).stdout.strip()  # fmt: skip
        waited = wait_for("Prometheus to count the running job's GPU", lambda: allocated_gpus() == 1, 30)
        during = prometheus("/api/v1/query", query="sum(gpucluster_node_gpus_allocated)")
        report.append(
            f"job {job} running; after {waited:.1f} s: sum(gpucluster_node_gpus_allocated) = {json.dumps(during)}"
        )
        per_node = prometheus("/api/v1/query", query="gpucluster_node_gpus_allocated")["data"]["result"]
        assert {r["metric"]["node"]: r["value"][1] for r in per_node} == {"c000": "1", "c001": "0"}

        # The page, through the host port forward, draws the allocation from Prometheus.
        eth0 = sh("ip", "-4", "-o", "addr", "show", "dev", "eth0").stdout.split()[3].split("/")[0]
        browser = Browser(width=1100, height=900)
        browser.open(f"http://{eth0}:{config['cluster']['web_app']['host_port']}/")
        browser.wait_for("document.getElementById('gpu-now').textContent === 'Now: 1 of 2 GPUs allocated'", 40)
        assert browser.count("#gpu-chart polygon.allocated") == 1
        assert browser.evaluate("document.getElementById('gpu-chart').getBoundingClientRect().height") > 100
        # The cluster panel (the snapshot writer's) shows the job too, for the screenshot.
        browser.wait_for(
            "[...document.querySelectorAll('#nodes tbody tr')].some(r => r.innerText.includes('1 / 1'))", 30
        )
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        browser.screenshot(ARTIFACTS / "metrics-panel.png")
        report.append(f"page: {browser.text('#gpu-now')!r}, {browser.text('#metrics-state')!r}")

        sh("scancel", job, env=SLURM)
        waited = wait_for("Prometheus to count 0 GPUs after the job", lambda: allocated_gpus() == 0, 30)
        after = prometheus("/api/v1/query", query="sum(gpucluster_node_gpus_allocated)")
        report.append(
            f"job {job} cancelled; after {waited:.1f} s: sum(gpucluster_node_gpus_allocated) = {json.dumps(after)}"
        )

        assert firing("NodeDrained") == []
        sh("scontrol", "update", "nodename=c001", "state=drain", f"reason={DRAIN_REASON}", env=SLURM)
        waited = wait_for(
            "the NodeDrained alert", lambda: any(a["state"] == "firing" for a in firing("NodeDrained")), 30
        )
        (alert,) = firing("NodeDrained")
        report.append(f"c001 drained; after {waited:.1f} s, /api/v1/alerts holds: {json.dumps(alert)}")
        assert alert["labels"]["node"] == "c001" and alert["labels"]["reason"].startswith(DRAIN_REASON)
        assert alert["annotations"]["summary"].startswith(f"node c001 is drained: {DRAIN_REASON}")
        assert firing("NodeDown") == [] and firing("GpuHealthCheckFailing") == []
        sh("scontrol", "update", "nodename=c001", "state=resume", env=SLURM)
        wait_for("the NodeDrained alert to end", lambda: firing("NodeDrained") == [], 30)

        # A reboot takes the exporter away: the boot unit's bring-up starts it again.
        cluster_dir = Path(f"/var/lib/gpucluster/{CLUSTER}")
        pid = (cluster_dir / "metrics" / "exporter.pid").read_text().strip()
        sh("kill", pid)
        wait_for("the exporter to stop", lambda: not Path(f"/proc/{pid}").exists(), 15)
        sh("/bin/bash", str(cluster_dir / "boot.sh"), str(cluster_dir / "host-state.env"))
        wait_for("the exporter back", lambda: exporter_answers(), 15)
        assert connects_from(f"{CLUSTER}-c001") == "refused"  # the boot unit keeps its guard
        assert (cluster_dir / "metrics" / "exporter.pid").read_text().strip() != pid
    finally:
        if browser:
            browser.close()
        if job:
            sh("scancel", job, env=SLURM, check=False)
        try:
            destroy_state(state)
        except CommandFailedError as error:
            print(f"destroy failed: {error}")
        teardown()

    with capsys.disabled():
        print("\n" + "\n".join(report))
    # Destroy keeps nothing of the metrics: the container, its data and the exporter are gone.
    assert not Path(f"/var/lib/lxc/{CLUSTER}-metrics").exists()
    assert not Path(f"/var/lib/gpucluster/{CLUSTER}/metrics").exists()
    assert leftovers(CLUSTER) == []
