"""The GPU web app itself, run as a process on loopback: health, jobs, fallback, bounded load,
process groups, origins, the snapshot panel's API; and its page in headless Chromium: a click
runs the job, output stays text, busy is shown plainly, a cross-origin POST from the browser is
refused, the cluster panel shows the snapshot."""

import contextlib
import json
import re
import select
import socket
import subprocess
import sys
import threading
import time
import typing
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from components.app.web_app import APP_SOURCE
from tests.harness.browser import Browser


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def start_app(tmp_path):
    processes = []

    def start(**settings) -> str:
        port = free_port()
        config = tmp_path / f"app-{port}.json"
        config.write_text(json.dumps({"port": port, **settings}))
        process = subprocess.Popen([sys.executable, str(APP_SOURCE), str(config)])
        processes.append(process)
        url = f"http://{settings.get('listen_address', '127.0.0.1')}:{port}"
        start.pids[url] = process.pid
        deadline = time.monotonic() + 10
        while True:
            try:
                urllib.request.urlopen(f"{url}/healthz", timeout=1).read()
                return url
            except OSError:
                assert time.monotonic() < deadline, "the app did not answer /healthz"
                time.sleep(0.05)

    start.pids = {}
    yield start
    for process in processes:
        process.kill()
        process.wait()


def get(url: str, data: bytes | None = None, headers: dict | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def run(url: str, headers: dict | None = None) -> tuple[int, dict]:
    """POST /api/run: what the page's Run button sends."""
    return get(f"{url}/api/run", data=b"", headers=headers)


def test_health_endpoint(start_app):
    url = start_app()
    assert get(f"{url}/healthz") == (200, {"status": "ok"})
    assert get(f"{url}/nope")[0] == 404


def test_without_a_gpu_the_cpu_fallback_is_labelled(start_app, tmp_path):
    url = start_app(gpu_device_glob=str(tmp_path / "nvidia[0-9]*"))
    status, body = run(url)
    assert status == 200
    assert body["mode"] == "cpu-fallback"
    assert "no GPU device node" in body["reason"]
    assert body["output"].startswith("CPU fallback:")
    assert body["seconds"] >= 0


def test_with_a_gpu_the_job_runs_and_is_timed(start_app, tmp_path):
    (tmp_path / "nvidia0").touch()
    url = start_app(gpu_device_glob=str(tmp_path / "nvidia[0-9]*"), job_command=["echo", "gpu job ran"])
    status, body = run(url)
    assert (status, body["mode"], body["output"], body["command"]) == (
        200,
        "gpu",
        "gpu job ran\n",
        ["echo", "gpu job ran"],
    )


def test_a_job_past_its_timeout_is_killed(start_app, tmp_path):
    (tmp_path / "nvidia0").touch()
    url = start_app(gpu_device_glob=str(tmp_path / "nvidia[0-9]*"), job_command=["sleep", "5"], job_timeout_s=0.3)
    status, body = run(url)
    assert status == 500 and body["returncode"] == -9 and "killed after" in body["output"]


def test_a_burst_cannot_start_more_jobs_than_the_limit(start_app, tmp_path):
    (tmp_path / "nvidia0").touch()
    started = tmp_path / "started"
    started.mkdir()
    # Each job marks that it runs, then holds its slot until the test releases it.
    release = tmp_path / "release"
    job = f'touch "{started}/$$"; while [ ! -e "{release}" ]; do sleep 0.05; done'
    url = start_app(
        gpu_device_glob=str(tmp_path / "nvidia[0-9]*"), job_command=["sh", "-c", job], max_concurrent_jobs=2
    )
    with ThreadPoolExecutor(max_workers=8) as pool:
        holders = [pool.submit(run, url) for _ in range(2)]
        deadline = time.monotonic() + 10
        while len(list(started.iterdir())) < 2:
            assert time.monotonic() < deadline, "the first two jobs did not start"
            time.sleep(0.05)
        burst = [status for status, _ in pool.map(lambda _: run(url), range(6))]
        release.touch()
        held = [future.result()[0] for future in holders]
    assert burst == [503] * 6, burst
    assert held == [200, 200]
    assert len(list(started.iterdir())) == 2, "a refused request started a job"
    assert run(url)[0] == 200, "a slot was not given back"


def alive(pid: int) -> bool:
    """Running or sleeping (a killed process may linger as a zombie until its parent reaps it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in {"Z", "X"}


@pytest.mark.parametrize("finishes", [False, True], ids=["timed-out", "finished"])
def test_a_job_is_killed_with_its_whole_process_group(start_app, tmp_path, finishes):
    """A grandchild the job started in the background is gone once the request is answered:
    after a timeout, and also when the job itself ended but left it behind."""
    (tmp_path / "nvidia0").touch()
    pidfile = tmp_path / "grandchild.pid"
    tail = "exit 0" if finishes else "sleep 30"
    job = f'sleep 300 > /dev/null 2>&1 & echo $! > "{pidfile}"; {tail}'
    url = start_app(gpu_device_glob=str(tmp_path / "nvidia[0-9]*"), job_command=["sh", "-c", job], job_timeout_s=1)
    status, body = run(url)
    assert (status, body["returncode"]) == ((200, 0) if finishes else (500, -9)), body
    grandchild = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while alive(grandchild):
        assert time.monotonic() < deadline, f"the job's grandchild {grandchild} survived the request"
        time.sleep(0.05)


def test_the_page_is_served_at_root_and_needs_nothing_from_elsewhere(start_app):
    url = start_app()
    with urllib.request.urlopen(f"{url}/", timeout=10) as response:
        page = response.read().decode()
        assert response.headers["Content-Type"].startswith("text/html")
        assert "default-src 'none'" in response.headers["Content-Security-Policy"]
    assert '<button id="run"' in page
    # Offline: no external script, style, font or image; output shown with textContent only.
    assert "http://" not in page and "https://" not in page and "src=" not in page
    assert "innerHTML" not in page and "textContent = body.output" in page
    assert get(f"{url}/api/run")[0] == 405, "a GET must not run a job"


def test_cross_origin_posts_are_refused_and_run_nothing(start_app, tmp_path):
    (tmp_path / "nvidia0").touch()
    runs = tmp_path / "runs"
    url = start_app(gpu_device_glob=str(tmp_path / "nvidia[0-9]*"), job_command=["sh", "-c", f'echo x >> "{runs}"'])
    host = url.removeprefix("http://")
    for headers in ({"Origin": "http://evil.example"}, {"Sec-Fetch-Site": "cross-site"}, {"Origin": "null"}):
        status, body = run(url, headers)
        assert status == 403 and "cross-origin" in body["error"], (headers, status, body)
    assert not runs.exists(), "a refused request ran the job"
    assert run(url, {"Origin": f"http://{host}", "Sec-Fetch-Site": "same-origin"})[0] == 200
    assert runs.read_text() == "x\n"
    counters = get(f"{url}/api/info")[1]["counters"]
    assert (counters["refused_cross_origin"], counters["jobs_started"]) == (3, 1)


def test_only_allowed_source_networks_may_run_jobs(start_app):
    refused = start_app(run_allowed_cidrs=["10.0.0.0/8"])
    status, body = run(refused)
    assert status == 403 and "127.0.0.1 may not run jobs" in body["error"]
    assert get(f"{refused}/api/info")[1]["run_allowed"] is False
    allowed = start_app(run_allowed_cidrs=["10.0.0.0/8", "127.0.0.0/8"])
    assert run(allowed)[0] == 200


def test_the_app_listens_only_on_its_address(start_app):
    url = start_app(listen_address="127.0.0.1")
    port = int(url.rsplit(":", 1)[1])
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.2", port), timeout=2):
        pass


def threads(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/task").iterdir()))


def test_connections_are_served_by_a_bounded_pool_and_idle_ones_time_out(start_app):
    url = start_app(max_connections=4, max_concurrent_jobs=1, socket_timeout_s=1)
    host, port = url.removeprefix("http://").split(":")
    # Many clients that connect and send nothing: at most 4 are served at once, the rest wait
    # in the listen backlog; the thread count does not grow with them.
    idle = [socket.create_connection((host, int(port)), timeout=5) for _ in range(16)]
    try:
        time.sleep(0.3)
        assert threads(start_app.pids[url]) <= 4 + 1, threads(start_app.pids[url])
        # Every idle client is dropped after the socket timeout (1 s each, 4 at a time), and
        # a real request is answered after them.
        started = time.monotonic()
        assert get(f"{url}/healthz") == (200, {"status": "ok"})
        waited = time.monotonic() - started
        closed = sum(1 for conn in idle if conn.recv(1) == b"")
    finally:
        for conn in idle:
            conn.close()
    assert closed == 16
    print(f"a request behind 16 idle connections (pool 4, socket timeout 1 s) waited {waited:.1f} s")


def test_slow_clients_do_not_hold_up_a_normal_request(start_app):
    """Clients that send their request one byte a second (each within the socket timeout of
    the previous one) hold no request thread: a normal request is answered at once, and each
    slow client is dropped when its whole request has not arrived within the socket timeout."""
    url = start_app(max_connections=3, max_concurrent_jobs=1, socket_timeout_s=3)
    host, port = url.removeprefix("http://").split(":")
    request = b"GET /healthz HTTP/1.0\r\nHost: x\r\nX-Slow: " + b"y" * 64
    slow = [socket.create_connection((host, int(port)), timeout=5) for _ in range(3 * 3)]
    connected = time.monotonic()
    dropped_after = {}
    stop = threading.Event()

    def trickle(conn: socket.socket, index: int) -> None:
        for byte in request[:10]:  # at most 10 s: the test stops by itself
            try:
                conn.sendall(bytes([byte]))
                readable, _, _ = select.select([conn], [], [], 1)  # the app's close, or a second
                closed = bool(readable) and conn.recv(1) == b""
            except OSError:
                closed = True
            if closed:
                dropped_after[index] = time.monotonic() - connected
                return
            if stop.is_set():
                return

    trickles = [threading.Thread(target=trickle, args=(conn, i)) for i, conn in enumerate(slow)]
    try:
        for thread in trickles:
            thread.start()
        time.sleep(1.5)  # every slow client has sent a byte or two
        waits = []
        for _ in range(3):
            started = time.monotonic()
            assert get(f"{url}/healthz") == (200, {"status": "ok"})
            waits.append(time.monotonic() - started)
        for thread in trickles:
            thread.join(timeout=15)
    finally:
        stop.set()
        for conn in slow:
            conn.close()
    assert max(waits) < 1, waits
    # Dropped at the deadline (3 s after connecting), not after their last byte.
    assert len(dropped_after) == len(slow) and max(dropped_after.values()) < 3 + 2, dropped_after
    print(f"behind {len(slow)} slow clients (pool 3, timeout 3 s): /healthz in {max(waits) * 1000:.0f} ms")


def test_one_source_holds_only_so_many_connections(start_app):
    url = start_app(max_open_per_source=4, socket_timeout_s=5)
    host, port = url.removeprefix("http://").split(":")
    held = [socket.create_connection((host, int(port)), timeout=5) for _ in range(4)]
    try:
        time.sleep(0.3)
        with socket.create_connection((host, int(port)), timeout=5) as extra:
            started = time.monotonic()
            assert extra.recv(1) == b""
            assert time.monotonic() - started < 1, "the fifth connection was not closed at once"
        held.pop().close()
        time.sleep(0.3)
        assert get(f"{url}/healthz") == (200, {"status": "ok"})
    finally:
        for conn in held:
            conn.close()


def test_an_oversized_request_is_dropped_at_once(start_app):
    url = start_app(socket_timeout_s=10)
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as conn:
        started = time.monotonic()
        with contextlib.suppress(ConnectionResetError, BrokenPipeError):
            conn.sendall(b"GET /healthz HTTP/1.0\r\nX-Big: " + b"y" * 64 * 1024)
        with contextlib.suppress(ConnectionResetError):
            assert conn.recv(1) == b""
        assert time.monotonic() - started < 2
    assert get(f"{url}/healthz") == (200, {"status": "ok"})


def raw_request(url: str, host: str, method: str = "GET", path: str = "/api/info", origin: str = "") -> int:
    """The status of a request whose Host header is `host` (a browser sends the name it resolved)."""
    address, port = url.removeprefix("http://").split(":")
    headers = f"Host: {host}\r\n" + (f"Origin: {origin}\r\nSec-Fetch-Site: same-origin\r\n" if origin else "")
    with socket.create_connection((address, int(port)), timeout=10) as conn:
        conn.sendall(f"{method} {path} HTTP/1.1\r\n{headers}Content-Length: 0\r\n\r\n".encode())
        return int(conn.makefile("rb").readline().split()[1])


def test_a_page_of_another_name_re_resolved_here_gets_nothing(start_app, tmp_path):
    """DNS rebinding: evil.example re-resolved to the app's address sends Host evil.example,
    and is same-origin to itself; only the app's own names and addresses are answered."""
    (tmp_path / "nvidia0").touch()
    runs = tmp_path / "runs"
    url = start_app(
        gpu_device_glob=str(tmp_path / "nvidia[0-9]*"),
        job_command=["sh", "-c", f'echo x >> "{runs}"'],
        run_allowed_cidrs=["127.0.0.0/8"],
        server_names=["gpu.example.org"],
    )
    port = url.rsplit(":", 1)[1]
    evil = f"evil.example:{port}"
    assert raw_request(url, evil, "POST", "/api/run", origin=f"http://{evil}") == 421
    assert raw_request(url, evil) == 421
    assert raw_request(url, evil, path="/api/cluster") == 421
    assert raw_request(url, f"127.0.0.1@evil.example:{port}") == 421
    assert not runs.exists(), "a rebinding request ran the job"
    for name in (f"127.0.0.1:{port}", "127.0.0.1", f"localhost:{port}", f"GPU.example.org:{port}", "[::1]:7000"):
        assert raw_request(url, name) == 200, name
    here = f"127.0.0.1:{port}"
    assert raw_request(url, here, "POST", "/api/run", origin=f"http://{here}") == 200
    assert runs.read_text() == "x\n"


def test_the_cluster_snapshot_is_served_with_its_age(start_app, tmp_path):
    snapshot = tmp_path / "cluster.json"
    url = start_app(status_file=str(snapshot), status_interval_s=5)
    body = get(f"{url}/api/cluster")[1]
    assert body["available"] is False and "no cluster snapshot yet" in body["error"]
    written = {
        "cluster": "t",
        "interval_s": 5,
        "written_at": time.time() - 2,
        "nodes": [{"name": "c000", "state": "idle", "gpus_total": 1, "gpus_used": 0}],
        "jobs": {"running": 0, "pending": 0, "list": []},
    }
    snapshot.write_text(json.dumps(written))
    body = get(f"{url}/api/cluster")[1]
    assert body["available"] and body["nodes"] == written["nodes"] and not body["stale"]
    assert 2 <= body["age_s"] < 10
    snapshot.write_text(json.dumps({**written, "written_at": time.time() - 60}))
    assert get(f"{url}/api/cluster")[1]["stale"] is True


# ---- the page, in headless Chromium ----

MARKUP = '<script>document.title="injected"</script><img src=x onerror="document.title=1"><b>bold</b>'


class ElsewherePage(BaseHTTPRequestHandler):
    # A connection Chromium opens ahead and never uses would hold this one-thread server (and
    # its shutdown at teardown) until Chromium closes it: drop such a socket after 2 s.
    timeout = 2

    def do_GET(self):
        data = b"<!doctype html><title>elsewhere</title><p>another site"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format, *args):  # noqa: A002 (http.server's signature)
        pass


@pytest.fixture
def elsewhere():
    """A page of another origin (another port), as a site the visitor also has open."""
    server = HTTPServer(("127.0.0.1", free_port()), ElsewherePage)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def browser():
    with Browser() as chromium:
        yield chromium


def click_run_and_wait(browser: Browser) -> None:
    browser.wait_for("!document.getElementById('run').disabled")
    browser.click("#run")
    browser.wait_for("!document.getElementById('run').disabled")


def test_without_a_gpu_the_page_runs_the_labelled_cpu_fallback(browser, start_app, tmp_path):
    url = start_app(gpu_device_glob=str(tmp_path / "nvidia[0-9]*"))
    browser.open(f"{url}/")
    browser.wait_for("document.getElementById('about').textContent.startsWith('No GPU here')")
    click_run_and_wait(browser)
    browser.wait_for("!document.getElementById('result').hidden")
    assert browser.text("#mode") == "CPU fallback"
    assert browser.text("#output").startswith("CPU fallback: 96x96 integer matrix product")
    assert re.fullmatch(r"\d+\.\d{3} s", browser.text("#duration")), browser.text("#duration")
    assert browser.text("#device").startswith("CPU of ")
    assert "no GPU device node" in browser.text("#reason")
    browser.screenshot(tmp_path / "page-cpu-fallback.png")
    assert (tmp_path / "page-cpu-fallback.png").stat().st_size > 10_000


def test_with_a_gpu_markup_in_the_output_stays_text(browser, start_app, tmp_path):
    (tmp_path / "nvidia0").touch()
    url = start_app(gpu_device_glob=str(tmp_path / "nvidia[0-9]*"), job_command=["printf", "%s\\n", MARKUP])
    browser.open(f"{url}/")
    title = browser.evaluate("document.title")
    click_run_and_wait(browser)
    browser.wait_for("!document.getElementById('result').hidden")
    assert browser.text("#mode") == "GPU"
    assert browser.text("#output") == MARKUP + "\n"
    assert browser.count("#output *") == 0, "job output became elements"
    assert browser.evaluate("document.title") == title, "job output ran as script"
    assert str(tmp_path / "nvidia0") in browser.text("#device")
    assert browser.visible("#reason") is False


def test_when_every_slot_is_taken_the_page_says_busy(browser, start_app, tmp_path):
    (tmp_path / "nvidia0").touch()
    release = tmp_path / "release"
    job = f'while [ ! -e "{release}" ]; do sleep 0.05; done; echo done'
    url = start_app(
        gpu_device_glob=str(tmp_path / "nvidia[0-9]*"), job_command=["sh", "-c", job], max_concurrent_jobs=1
    )
    holder = threading.Thread(target=run, args=(url,))
    holder.start()
    try:
        deadline = time.monotonic() + 10
        while get(f"{url}/api/info")[1]["counters"]["jobs_started"] < 1:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        browser.open(f"{url}/")
        click_run_and_wait(browser)
        browser.wait_for("!document.getElementById('notice').hidden")
        assert browser.evaluate("document.getElementById('notice').className") == "notice busy"
        assert browser.text("#notice") == "Busy: all 1 job slots are taken. Try again in a moment."
        assert browser.visible("#result") is False
    finally:
        release.touch()
        holder.join()
    # The slot is free again: the next click runs.
    click_run_and_wait(browser)
    browser.wait_for("!document.getElementById('result').hidden")
    assert browser.text("#output") == "done\n"


def test_a_cross_origin_post_from_the_browser_is_refused(browser, start_app, elsewhere, tmp_path):
    (tmp_path / "nvidia0").touch()
    url = start_app(gpu_device_glob=str(tmp_path / "nvidia[0-9]*"), job_command=["true"])
    browser.open(f"{elsewhere}/")
    outcome = browser.evaluate(
        f"fetch({json.dumps(url + '/api/run')}, {{method: 'POST', mode: 'no-cors', body: ''}})"
        ".then(() => 'sent', (e) => 'failed: ' + e)"
    )
    assert outcome == "sent"
    assert 403 in browser.responses(f"{url}/api/run")
    counters = get(f"{url}/api/info")[1]["counters"]
    assert (counters["jobs_started"], counters["refused_cross_origin"]) == (0, 1)


def test_the_cluster_panel_shows_the_snapshot_and_its_age(browser, start_app, tmp_path):
    snapshot = tmp_path / "cluster.json"
    url = start_app(status_file=str(snapshot))
    browser.open(f"{url}/")
    browser.wait_for("document.getElementById('snapshot-age').textContent.startsWith('no cluster snapshot yet')")
    snapshot.write_text(
        json.dumps(
            {
                "cluster": "demo",
                "interval_s": 5,
                "written_at": time.time(),
                "nodes": [
                    {"name": "c000", "state": "mixed", "gpus_total": 1, "gpus_used": 1},
                    {"name": "c001", "state": "idle", "gpus_total": 1, "gpus_used": 0},
                ],
                "jobs": {
                    "running": 1,
                    "pending": 1,
                    "list": [
                        {"id": "7", "state": "RUNNING", "gres": "gres:gpu:1", "name": "train"},
                        {"id": "8", "state": "PENDING", "gres": "gres:gpu:1", "name": "<b>x</b>"},
                    ],
                },
            }
        )
    )
    browser.wait_for("!document.getElementById('nodes').hidden", timeout=10)
    rows = browser.evaluate("[...document.querySelectorAll('#nodes tbody tr')].map(r => r.innerText.split('\\t'))")
    assert rows == [["c000", "mixed", "1 / 1"], ["c001", "idle", "0 / 1"]]
    assert browser.text("#gpus") == "GPUs: 1 free, 1 used, 2 in all"
    assert browser.text("#jobs-summary") == "1 running, 1 queued"
    assert browser.count("#jobs tbody b") == 0
    assert re.match(r"Snapshot of cluster demo, \d+(\.\d)? s old$", browser.text("#snapshot-age"))


def test_server_names_come_from_the_config_and_bad_ones_name_the_field():
    from pydantic import ValidationError

    from components.app.web_app import render_app_settings
    from components.composition.config import ClusterConfig
    from tests.harness.program_harness import stack_config

    raw = stack_config("e2e")["cluster"]
    raw["web_app"]["server_names"] = ["gpu.example.org", "gpuhost"]
    settings = json.loads(render_app_settings(ClusterConfig.model_validate(raw).web_app))
    assert settings["server_names"] == ["gpu.example.org", "gpuhost"]
    raw["web_app"]["server_names"] = ["evil.example:80"]
    with pytest.raises(ValidationError, match=r"web_app\.server_names\.0"):
        ClusterConfig.model_validate(raw)


class FakePrometheus(BaseHTTPRequestHandler):
    """The cluster's Prometheus HTTP API as the panel asks it: GPUs allocated (1 for the last
    20 minutes, 0 before) and in all (2) over the window asked, and the month's cost per account."""

    asked: typing.ClassVar[list] = []

    def do_GET(self):
        parts = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(parts.query))
        FakePrometheus.asked.append((parts.path, query))
        if parts.path == "/api/v1/query_range":
            start, end, step = float(query["start"]), float(query["end"]), float(query["step"])
            times = [start + i * step for i in range(int((end - start) // step) + 1)]
            if query["query"] == "sum(gpucluster_node_gpus_allocated)":
                values = [[t, "1" if t >= end - 1200 else "0"] for t in times]
            else:
                values = [[t, "2"] for t in times]
            result = [{"metric": {}, "values": values}]
        else:
            figures = {
                "gpucluster_account_cost_usd_month": {"physics": "0.003", "<b>chem</b>": "1.5"},
                "gpucluster_account_gpu_seconds_month": {"physics": "3", "<b>chem</b>": "1500"},
            }[query["query"]]
            result = [{"metric": {"account": a}, "value": [query["time"], v]} for a, v in figures.items()]
        data = json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format, *args):  # noqa: A002 (http.server's signature)
        pass


@pytest.fixture
def prometheus():
    FakePrometheus.asked = []
    server = HTTPServer(("127.0.0.1", free_port()), FakePrometheus)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_metrics_api_asks_prometheus_for_the_last_hour_and_the_months_cost(start_app, prometheus):
    url = start_app(prometheus_url=prometheus)
    status, body = get(f"{url}/api/metrics")
    assert status == 200 and body["available"], body
    assert body["end"] - body["start"] == 3600 and body["step"] == 60
    assert len(body["allocated"]) == 61 and body["allocated"][-1][1] == 1 and body["allocated"][0][1] == 0
    assert body["total"][-1][1] == 2
    assert body["accounts"] == [
        {"account": "<b>chem</b>", "usd": 1.5, "gpu_hours": round(1500 / 3600, 4)},
        {"account": "physics", "usd": 0.003, "gpu_hours": round(3 / 3600, 4)},
    ]
    queries = sorted(query["query"] for _, query in FakePrometheus.asked)
    assert queries == [
        "gpucluster_account_cost_usd_month",
        "gpucluster_account_gpu_seconds_month",
        "sum(gpucluster_node_gpus)",
        "sum(gpucluster_node_gpus_allocated)",
    ]


def test_without_prometheus_the_metrics_api_says_why(start_app):
    assert get(f"{start_app()}/api/metrics") == (
        200,
        {"available": False, "error": "no metrics: the stack has no metrics section"},
    )
    status, body = get(f"{start_app(prometheus_url=f'http://127.0.0.1:{free_port()}')}/api/metrics")
    assert status == 200 and not body["available"] and body["error"].startswith("Prometheus did not answer: ")


def test_the_page_draws_the_last_hour_of_gpu_allocation_and_the_cost_per_account(browser, start_app, prometheus):
    url = start_app(prometheus_url=prometheus)
    browser.open(f"{url}/")
    browser.wait_for("!document.getElementById('costs').hidden")
    # Shown for real: an SVG element has no `hidden` property, only the attribute the CSS reads.
    assert browser.evaluate("document.getElementById('gpu-chart').getBoundingClientRect().height") > 100
    assert browser.text("#gpu-now") == "Now: 1 of 2 GPUs allocated"
    # Drawn inline: SVG elements in the page, the allocated area and the dashed total line.
    assert browser.count("#gpu-chart polygon.allocated") == 1 and browser.count("#gpu-chart polyline.total") == 1
    labels = browser.evaluate("[...document.querySelectorAll('#gpu-chart text')].map(t => t.textContent)")
    assert labels == ["0", "1", "2", "-60 min", "-30 min", "now"]
    # The area's top is at 1 GPU of 2 for the last 20 minutes, at 0 before.
    heights = browser.evaluate(
        "[...new Set(document.querySelector('#gpu-chart polygon').getAttribute('points').split(' ')"
        ".map(p => p.split(',')[1]))]"
    )
    assert sorted(float(y) for y in heights) == [83.0, 156.0]  # y of 1 and of 0 GPUs in the 180-high chart
    rows = browser.evaluate("[...document.querySelectorAll('#costs tbody tr')].map(r => r.innerText.split('\\t'))")
    assert rows == [["<b>chem</b>", "0.4167", "$1.5000"], ["physics", "0.0008", "$0.0030"]]
    assert browser.count("#costs tbody b") == 0
