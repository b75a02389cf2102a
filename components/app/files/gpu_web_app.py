"""The GPU web app: a page at `/` with a Run button, and its JSON API under `/api/`.

This file is the HTTP front (the event loop reading requests, a fixed pool of threads handling
them) and the entry point; the handlers and settings are web_handlers.py, the page
web_page.py, shipped beside it.

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
from concurrent.futures import ThreadPoolExecutor

from web_handlers import (
    LISTEN_ADDRESS,
    MAX_BODY_BYTES,
    MAX_CONNECTIONS,
    MAX_HEAD_BYTES,
    MAX_OPEN,
    MAX_OPEN_PER_SOURCE,
    PORT,
    SOCKET_TIMEOUT_S,
    Handler,
)


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


if __name__ == "__main__":
    main()
