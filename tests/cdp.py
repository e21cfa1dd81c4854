"""A minimal headless Chromium driver over the DevTools protocol, for tests/reports/test_html.py.

``Browser()`` starts ``chromium --headless=new --remote-debugging-port=0`` with a fresh
profile, reads the DevTools address it prints on stderr, attaches to its page over a
websocket (websocket-client) and offers ``navigate``, ``evaluate`` and ``screenshot``.
Every console error, uncaught exception and error log entry lands in ``errors``.
"""

from __future__ import annotations

import base64
import json
import os
import queue
import re
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request

CANDIDATES = ("chromium", "chromium-browser", "google-chrome")


def find() -> str | None:
    """The path of a Chromium executable, or None."""
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


class Browser:
    def __init__(self, executable: str, width: int = 1280, height: int = 900,
                 timeout: float = 60.0):
        import websocket                                   # websocket-client (test extra)
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="roundoff-chromium-")
        self.proc = subprocess.Popen(
            [executable, "--headless=new", "--remote-debugging-port=0", "--no-sandbox",
             "--disable-gpu", "--no-first-run", "--no-default-browser-check",
             f"--user-data-dir={self.profile}", f"--window-size={width},{height}",
             "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            port = self._port()
            page = self._page_target(port)
            # No Origin header: chromium refuses websocket origins it was not told to allow.
            self.ws = websocket.create_connection(page, timeout=timeout, suppress_origin=True)
        except BaseException:
            self.close()
            raise
        self._id, self.errors, self.events = 0, [], []
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable")

    def _port(self) -> int:
        """The DevTools port from the line "DevTools listening on ws://127.0.0.1:PORT/...".
        A thread keeps reading stderr to its end: chromium logs there all the time, and a
        full pipe would stop it."""
        lines = queue.Queue()

        def drain():
            for line in self.proc.stderr:
                lines.put(line)
            lines.put(None)
        threading.Thread(target=drain, daemon=True).start()
        deadline = time.monotonic() + self.timeout
        seen = []
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                break
            seen.append(line.strip())
            m = re.search(r"DevTools listening on ws://[^:/]+:(\d+)/", line)
            if m:
                return int(m.group(1))
        raise RuntimeError("chromium printed no DevTools address: " + " | ".join(seen[-5:]))

    def _page_target(self, port) -> str:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
                targets = json.load(r)
            pages = [t for t in targets if t.get("type") == "page"]
            if pages:
                return pages[0]["webSocketDebuggerUrl"]
            time.sleep(0.1)
        raise RuntimeError("chromium opened no page")

    def _record(self, msg) -> None:
        method, p = msg.get("method"), msg.get("params", {})
        self.events.append(method)
        if method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            self.errors.append("console: " + " ".join(
                str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
        elif method == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            self.errors.append("exception: " + str(d.get("exception", {}).get(
                "description", d.get("text"))))
        elif method == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            e = p["entry"]
            self.errors.append(f"log: {e.get('text')} {e.get('url', '')}")

    def call(self, method, **params):
        """Send one command and wait for its answer (events meanwhile are recorded)."""
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self._id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self._record(msg)

    def wait_for(self, event, timeout=None) -> None:
        deadline = time.monotonic() + (timeout or self.timeout)
        while time.monotonic() < deadline:
            msg = json.loads(self.ws.recv())
            self._record(msg)
            if msg.get("method") == event:
                return
        raise TimeoutError(event)

    def navigate(self, url) -> None:
        self.call("Page.navigate", url=url)
        self.wait_for("Page.loadEventFired")

    def evaluate(self, expression):
        """The value of a JavaScript expression (by value; exceptions raise)."""
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True,
                      awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"JavaScript error: {r['exceptionDetails']}")
        return r["result"].get("value")

    def screenshot(self, path, clip=None) -> int:
        """Write a PNG of the page (or of ``clip`` {x, y, width, height}) to ``path``;
        its size in bytes."""
        params = {"format": "png", "captureBeyondViewport": clip is not None}
        if clip:
            params["clip"] = dict(clip, scale=1)
        data = base64.b64decode(self.call("Page.captureScreenshot", **params)["data"])
        with open(path, "wb") as fh:
            fh.write(data)
        return len(data)

    def close(self) -> None:
        ws = getattr(self, "ws", None)
        if ws is not None:
            ws.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def file_url(path) -> str:
    return "file://" + os.path.abspath(path)
