"""The web app's page on the running e2e cluster, in headless Chromium through the host port
forward: a click runs the job (the labelled CPU fallback: the e2e GPUs are stand-ins), the
cluster panel matches `sinfo`, a busy app says so, a GPU job's markup output stays text, a
cross-origin POST is refused, and the app's container holds no Slurm or munge.

Called by tests/test_e2e.py while the cluster is up; screenshots go to ARTIFACTS.
"""

import json
import os
import re
import subprocess
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

from tests.harness.browser import Browser

ARTIFACTS = Path(os.environ.get("GPUCLUSTER_ARTIFACTS", "/tmp/gpucluster-e2e-artifacts"))
MARKUP = '<script>document.title="injected"</script><b>stand-in GPU 0</b>'
# A stand-in nvidia-smi: prints markup, then holds its job slot while the hold file exists.
STAND_IN_SMI = f"""#!/bin/sh
printf '%s\\n' '{MARKUP}'
while [ -e /run/gpu-stand-in-hold ]; do sleep 0.1; done
"""


def sh(*argv: str, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    environment = {**os.environ, **(env or {})}
    return subprocess.run(argv, capture_output=True, text=True, check=check, timeout=120, env=environment)


def api(url: str, path: str, method: str = "GET") -> tuple[int, dict]:
    request = urllib.request.Request(url.rstrip("/") + path, method=method, data=b"" if method == "POST" else None)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def counters(url: str) -> dict:
    return api(url, "/api/info")[1]["counters"]


class ElsewherePage(BaseHTTPRequestHandler):
    """Another site the visitor has open (another origin)."""

    def do_GET(self):
        data = b"<!doctype html><title>elsewhere</title><p>another site"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format, *args):  # noqa: A002 (http.server's signature)
        pass


def check_app_container(container: str, app_address: str, port: int, report: list[str]) -> None:
    """No Slurm client, no munge (key, socket or daemon); the snapshot mount is read-only;
    the app listens on the container's address only."""

    def in_ct(*argv: str) -> subprocess.CompletedProcess:
        return sh("lxc-attach", "-n", container, "--", *argv, check=False)

    tools = in_ct("sh", "-c", "command -v sinfo srun squeue scontrol munge munged; ls -d /etc/munge /run/munge")
    report.append(
        f"$ lxc-attach -n {container} -- command -v sinfo srun munge ...; ls -d /etc/munge /run/munge\n"
        f"{tools.stdout}{tools.stderr}"
    )
    assert tools.stdout.strip() == "", f"the app's container holds Slurm or munge: {tools.stdout}"
    key = in_ct("sh", "-c", "find / -xdev -name munge.key 2>/dev/null")
    assert key.stdout.strip() == "", key.stdout
    write = in_ct("touch", "/var/lib/cluster-status/x")
    report.append(f"$ lxc-attach -n {container} -- touch /var/lib/cluster-status/x\n{write.stderr}")
    assert write.returncode != 0 and "Read-only file system" in write.stderr
    probe = "import socket, sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3)"
    assert in_ct("python3", "-c", probe, app_address, str(port)).returncode == 0
    loopback = in_ct("python3", "-c", probe, "127.0.0.1", str(port))
    assert loopback.returncode != 0 and "ConnectionRefusedError" in loopback.stderr, loopback.stderr


def check_panel_matches_sinfo(browser: Browser, slurm_env: dict, interval: float, report: list[str]) -> None:
    """The panel shows what `sinfo` says, at the latest one snapshot interval (plus the page's
    3 s refresh) after sinfo says it: jobs that just ended may still show in an older snapshot."""
    browser.wait_for("!document.getElementById('nodes').hidden", timeout=3 * interval + 10)
    script = "[...document.querySelectorAll('#nodes tbody tr')].map(r => r.innerText.split('\\t'))"
    started = time.monotonic()
    while True:
        sinfo = sh("sinfo", "-h", "-N", "-o", "%N %T", env=slurm_env).stdout.split("\n")
        expected = sorted({tuple(line.split()) for line in sinfo if line.strip()})
        rows = browser.evaluate(script)
        if [(name, state) for name, state, _ in rows] == expected:
            break
        assert time.monotonic() - started < interval + 3 + 5, (rows, expected)
        time.sleep(0.5)
    waited = time.monotonic() - started
    report.append(
        "$ sinfo -h -N -o '%N %T'\n" + "\n".join(sinfo) + f"\npanel (after {waited:.1f} s): {json.dumps(rows)}"
    )
    assert all(gpus == "0 / 1" for _, state, gpus in rows if state == "idle"), rows
    age = re.match(r"Snapshot of cluster \w+, ([\d.]+) s old$", browser.text("#snapshot-age"))
    assert age and float(age.group(1)) <= 3 * interval, browser.text("#snapshot-age")


def check_web_page(config: dict, slurm_env: dict, report: list[str], name: str) -> None:
    cluster = config["cluster"]
    web = cluster["web_app"]
    container = f"{cluster['name']}-{web['name']}"
    interval = web.get("status_interval_s", 5)
    slots = web.get("max_concurrent_jobs", 2)
    eth0 = sh("ip", "-4", "-o", "addr", "show", "dev", "eth0").stdout.split()[3].split("/")[0]
    url = f"http://{eth0}:{web['host_port']}/"  # through the host port forward

    check_app_container(container, web["nat_address"], web.get("port", 8080), report)
    elsewhere = HTTPServer((eth0, 0), ElsewherePage)
    threading.Thread(target=elsewhere.serve_forever, daemon=True).start()
    browser = None
    try:
        browser = Browser()
        browser.open(url)
        browser.wait_for("document.getElementById('about').textContent.startsWith('No GPU here')")
        check_panel_matches_sinfo(browser, slurm_env, interval, report)

        # Run: the stand-in GPUs cannot run nvidia-smi, so the labelled CPU fallback runs.
        browser.click("#run")
        browser.wait_for("!document.getElementById('result').hidden && !document.getElementById('run').disabled")
        result = {key: browser.text(f"#{key}") for key in ("mode", "device", "duration", "output")}
        report.append(f"page {url} after a click on Run: {json.dumps(result)}")
        assert result["mode"] == "CPU fallback"
        assert result["device"] == f"CPU of {web['name']} (no GPU job ran)"
        assert re.fullmatch(r"\d+\.\d{3} s", result["duration"])
        assert result["output"].startswith("CPU fallback: 96x96 integer matrix product, checksum ")
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        browser.screenshot(ARTIFACTS / f"web-app-{name}.png")

        # A page of another origin posts to the app: refused, no job runs.
        before = counters(url)
        browser.open(f"http://{eth0}:{elsewhere.server_address[1]}/")
        sent = browser.evaluate(
            f"fetch({json.dumps(url + 'api/run')}, {{method: 'POST', mode: 'no-cors', body: ''}})"
            ".then(() => 'sent', (e) => 'failed: ' + e)"
        )
        after = counters(url)
        assert sent == "sent" and 403 in browser.responses(f"{url}api/run")
        assert after["jobs_started"] == before["jobs_started"]
        assert after["refused_cross_origin"] == before["refused_cross_origin"] + 1
        report.append(f"cross-origin POST from http://{eth0}:{elsewhere.server_address[1]}/: 403, no job ran")

        # A stand-in nvidia-smi makes the job a "GPU" job that holds its slot: fill every
        # slot, then the page says busy; released, the GPU job's markup output stays text.
        subprocess.run(
            [
                "lxc-attach",
                "-n",
                container,
                "--",
                "sh",
                "-c",
                "cat > /usr/local/bin/nvidia-smi; chmod 0755 /usr/local/bin/nvidia-smi; touch /run/gpu-stand-in-hold",
            ],
            input=STAND_IN_SMI,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        started = counters(url)["jobs_started"]
        holders = [threading.Thread(target=api, args=(url, "/api/run", "POST")) for _ in range(slots)]
        for holder in holders:
            holder.start()
        deadline = time.monotonic() + 30
        while counters(url)["jobs_started"] < started + slots:
            assert time.monotonic() < deadline, "the slot holders did not start"
            time.sleep(0.1)
        browser.open(url)
        browser.wait_for("!document.getElementById('run').disabled")
        browser.click("#run")
        browser.wait_for("!document.getElementById('notice').hidden")
        busy = browser.text("#notice")
        report.append(f"page while {slots} jobs hold every slot: {busy!r}")
        assert busy == f"Busy: all {slots} job slots are taken. Try again in a moment."
        assert browser.evaluate("document.getElementById('notice').className") == "notice busy"
        browser.screenshot(ARTIFACTS / f"web-app-busy-{name}.png")
        sh("lxc-attach", "-n", container, "--", "rm", "-f", "/run/gpu-stand-in-hold")
        for holder in holders:
            holder.join(timeout=60)

        title = browser.evaluate("document.title")
        browser.click("#run")
        browser.wait_for("!document.getElementById('result').hidden && !document.getElementById('run').disabled")
        assert browser.text("#mode") == "GPU"
        assert browser.text("#output") == MARKUP + "\n"
        assert browser.count("#output *") == 0 and browser.evaluate("document.title") == title
        report.append(f"GPU job printing markup: shown as text {browser.text('#output')!r}")
    finally:
        if browser:
            browser.close()
        elsewhere.shutdown()
        elsewhere.server_close()
        sh(
            "lxc-attach",
            "-n",
            container,
            "--",
            "rm",
            "-f",
            "/usr/local/bin/nvidia-smi",
            "/run/gpu-stand-in-hold",
            check=False,
        )
