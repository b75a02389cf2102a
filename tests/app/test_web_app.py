"""The GPU web app itself, run as a process on loopback: health, jobs, fallback, bounded load."""

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from components.app.web_app import APP_SOURCE


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
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 10
        while True:
            try:
                urllib.request.urlopen(f"{url}/healthz", timeout=1).read()
                return url
            except OSError:
                assert time.monotonic() < deadline, "the app did not answer /healthz"
                time.sleep(0.05)

    yield start
    for process in processes:
        process.kill()
        process.wait()


def get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_health_endpoint(start_app):
    url = start_app()
    assert get(f"{url}/healthz") == (200, {"status": "ok"})
    assert get(f"{url}/nope")[0] == 404


def test_without_a_gpu_the_cpu_fallback_is_labelled(start_app, tmp_path):
    url = start_app(gpu_device_glob=str(tmp_path / "nvidia[0-9]*"))
    status, body = get(f"{url}/")
    assert status == 200
    assert body["mode"] == "cpu-fallback"
    assert "no GPU device node" in body["reason"]
    assert body["output"].startswith("CPU fallback:")
    assert body["seconds"] >= 0


def test_with_a_gpu_the_job_runs_and_is_timed(start_app, tmp_path):
    (tmp_path / "nvidia0").touch()
    url = start_app(gpu_device_glob=str(tmp_path / "nvidia[0-9]*"), job_command=["echo", "gpu job ran"])
    status, body = get(f"{url}/")
    assert (status, body["mode"], body["output"], body["command"]) == (
        200,
        "gpu",
        "gpu job ran\n",
        ["echo", "gpu job ran"],
    )


def test_a_job_past_its_timeout_is_killed(start_app, tmp_path):
    (tmp_path / "nvidia0").touch()
    url = start_app(gpu_device_glob=str(tmp_path / "nvidia[0-9]*"), job_command=["sleep", "5"], job_timeout_s=0.3)
    status, body = get(f"{url}/")
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
        holders = [pool.submit(get, f"{url}/") for _ in range(2)]
        deadline = time.monotonic() + 10
        while len(list(started.iterdir())) < 2:
            assert time.monotonic() < deadline, "the first two jobs did not start"
            time.sleep(0.05)
        burst = [status for status, _ in pool.map(lambda _: get(f"{url}/"), range(6))]
        release.touch()
        held = [future.result()[0] for future in holders]
    assert burst == [503] * 6, burst
    assert held == [200, 200]
    assert len(list(started.iterdir())) == 2, "a refused request started a job"
    assert get(f"{url}/")[0] == 200, "a slot was not given back"
