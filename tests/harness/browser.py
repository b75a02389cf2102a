"""Headless Chromium driven over the DevTools protocol: open a page, click, read the DOM.

Test harness only. Chromium is the Debian package (tests/debian-packages.txt); the protocol
travels over a WebSocket (websocket-client). Clicks are real mouse events at the element's
centre, dispatched through Chromium's input pipeline, not JavaScript `.click()` calls.
"""

import base64
import itertools
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import websocket

CHROMIUM = "chromium"


class Browser:
    """One headless Chromium with one page; use as a context manager."""

    def __init__(self, width: int = 1100, height: int = 760):
        assert shutil.which(CHROMIUM), "chromium is missing: run `bash .ci/run`, which installs it"
        self.profile = tempfile.mkdtemp(prefix="gpucluster-chromium-")
        self.process = subprocess.Popen(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",  # root in CI; the pages opened are the tests' own
                "--disable-gpu",
                "--no-first-run",
                "--no-proxy-server",
                "--remote-debugging-port=0",
                f"--user-data-dir={self.profile}",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.ids = itertools.count(1)
        self.events: list[dict] = []
        try:
            port = self._devtools_port()
            page = self._first_page(port)
            self.ws = websocket.create_connection(page, timeout=30, suppress_origin=True)
            self.call("Page.enable")
            self.call("Runtime.enable")
            self.call("Network.enable")
        except BaseException:
            self.close()
            raise

    def _devtools_port(self) -> int:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = self.process.stderr.readline()
            found = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line)
            if found:
                return int(found.group(1))
            if not line and self.process.poll() is not None:
                break
        raise RuntimeError(f"chromium did not start (exit status {self.process.poll()})")

    def _first_page(self, port: int) -> str:
        import urllib.request

        deadline = time.monotonic() + 10
        while True:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as response:
                pages = [t for t in json.loads(response.read()) if t["type"] == "page"]
            if pages:
                return pages[0]["webSocketDebuggerUrl"]
            assert time.monotonic() < deadline, "chromium opened no page"
            time.sleep(0.1)

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if getattr(self, "ws", None):
            self.ws.close()
        if self.process.poll() is None:
            os.killpg(self.process.pid, 9)
        self.process.wait()
        self.process.stderr.close()
        shutil.rmtree(self.profile, ignore_errors=True)

    def call(self, method: str, **params) -> dict:
        """Send one protocol command and return its result; events that arrive meanwhile are kept."""
        message_id = next(self.ids)
        self.ws.send(json.dumps({"id": message_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == message_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]
            self.events.append(message)

    def evaluate(self, expression: str):
        """The value of a JavaScript expression in the page (promises are awaited)."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def open(self, url: str) -> None:
        result = self.call("Page.navigate", url=url)
        assert not result.get("errorText"), f"{url}: {result['errorText']}"
        self.wait_for("document.readyState === 'complete'")

    def wait_for(self, expression: str, timeout: float = 30):
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            assert time.monotonic() < deadline, f"timed out waiting for {expression}"
            time.sleep(0.1)

    def click(self, selector: str) -> None:
        """A left click at the centre of the element, as a mouse would do it."""
        box = self.evaluate(
            f"(() => {{ const r = document.querySelector({json.dumps(selector)}).getBoundingClientRect();"
            " return [r.left + r.width / 2, r.top + r.height / 2]; })()"
        )
        x, y = box
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            extra = {"button": "left", "clickCount": 1} if kind != "mouseMoved" else {}
            self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, **extra)

    def text(self, selector: str) -> str:
        return self.evaluate(f"document.querySelector({json.dumps(selector)}).textContent")

    def visible(self, selector: str) -> bool:
        return self.evaluate(f"!document.querySelector({json.dumps(selector)}).closest('[hidden]')")

    def count(self, selector: str) -> int:
        return self.evaluate(f"document.querySelectorAll({json.dumps(selector)}).length")

    def screenshot(self, path: Path) -> None:
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))

    def responses(self, url_part: str) -> list[int]:
        """HTTP statuses of the responses the page received for URLs containing url_part."""
        self.call("Runtime.evaluate", expression="0")  # drain events that arrived so far
        return [
            event["params"]["response"]["status"]
            for event in self.events
            if event.get("method") == "Network.responseReceived" and url_part in event["params"]["response"]["url"]
        ]
