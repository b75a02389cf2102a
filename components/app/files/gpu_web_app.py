"""The GPU web app: `GET /` runs one GPU job and returns its output and timing as JSON.

Runs in the web app container under systemd, Python standard library only. Settings come
from the JSON file named by the first argument (written by webapp_create.sh):
  port                 port to listen on (the port the host forward targets)
  job_command          the GPU job's argv (e.g. ["nvidia-smi"])
  max_concurrent_jobs  jobs running at once; a request beyond that gets 503 at once
  job_timeout_s        a job running longer is killed
  gpu_device_glob      where GPU device nodes appear (default /dev/nvidia[0-9]*)
The PORT environment variable, when set, wins over `port` (the Kubernetes Deployment sets it).
When the job cannot run here (no GPU device node, or the command is missing) the app runs
a small CPU matrix product instead and says so in `mode`.
"""

import glob
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

SETTINGS = json.loads(Path(sys.argv[1]).read_text()) if len(sys.argv) > 1 else {}
PORT = int(os.environ.get("PORT") or SETTINGS.get("port", 8080))
JOB_COMMAND = list(SETTINGS.get("job_command", ["nvidia-smi"]))
MAX_CONCURRENT_JOBS = int(SETTINGS.get("max_concurrent_jobs", 2))
JOB_TIMEOUT_S = float(SETTINGS.get("job_timeout_s", 60))
GPU_DEVICE_GLOB = SETTINGS.get("gpu_device_glob", "/dev/nvidia[0-9]*")

job_slots = threading.BoundedSemaphore(MAX_CONCURRENT_JOBS)


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


def run_job() -> tuple[int, dict]:
    started = time.monotonic()
    reason = gpu_unavailable_reason()
    if reason:
        output, returncode, mode = cpu_matrix_product(), 0, "cpu-fallback"
    else:
        mode = "gpu"
        try:
            done = subprocess.run(JOB_COMMAND, capture_output=True, text=True, timeout=JOB_TIMEOUT_S, check=False)
            output, returncode = done.stdout + done.stderr, done.returncode
        except subprocess.TimeoutExpired:
            output, returncode = f"job killed after {JOB_TIMEOUT_S:g} s\n", -9
    result = {
        "mode": mode,
        "reason": reason,
        "command": JOB_COMMAND if mode == "gpu" else None,
        "returncode": returncode,
        "seconds": round(time.monotonic() - started, 4),
        "output": output,
    }
    return (200 if returncode == 0 else 500), result


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/healthz":
            self._reply(200, {"status": "ok"})
        elif self.path == "/":
            # Never queue jobs: a burst beyond the limit is refused, not started later.
            if not job_slots.acquire(blocking=False):
                self._reply(503, {"error": f"busy: {MAX_CONCURRENT_JOBS} jobs running"})
                return
            try:
                self._reply(*run_job())
            finally:
                job_slots.release()
        else:
            self._reply(404, {"error": "not found"})

    def _reply(self, status: int, body: dict) -> None:
        data = (json.dumps(body, indent=1) + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format, *args):  # noqa: A002 (http.server's signature)
        pass


def main() -> None:
    server = ThreadingHTTPServer(("0.0.0.0", PORT), Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
