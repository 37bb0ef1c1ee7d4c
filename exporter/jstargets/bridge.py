"""The Python end of the JavaScript targets: a local HTTP server (127.0.0.1, a port the system picks, every path
under a random token) that hands jobs to ``serve.mjs`` running in Node or in headless Chromium and takes their
answers back. One frame format both ways (``serve.mjs`` says it): the arrays cross as their raw bytes, so an
output comes back bit for bit as the JavaScript runtime computed it.

HTTP and not Node's stdin: the browser has no stdin, and one protocol serves both targets. The standard library's
``ThreadingHTTPServer``: the page's requests wait for the next job while the replay's thread gives them.
"""

from __future__ import annotations

import json
import mimetypes
import queue
import secrets
import struct
import subprocess
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
START_TIMEOUT = 120.0  # the page or script asking for its first job (Chromium's start and onnxruntime-web's wasm compile: 1-3 s here)
CALL_TIMEOUT = 1800.0  # one job: a session created or a batch run
POLL = 0.25
# Chromium as a headless page runner: no profile state, no network beyond the bridge, no GPU
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--disable-extensions", "--mute-audio", "--remote-debugging-port=0")


class JsError(RuntimeError):
    """The JavaScript runtime's own words about a job it could not do (or why the page or script stopped)."""


def frame(header: dict[str, Any], arrays: list[tuple[str, np.ndarray]]) -> bytes:
    """One message: the header's length, the header (with each array's name, type, dims, byte count), the bytes."""
    blobs = [np.asarray(a, order="C") for _, a in arrays]  # (ascontiguousarray would make a 0-d array 1-d)
    listed = [{"name": n, "type": "bool" if a.dtype == np.bool_ else a.dtype.name, "dims": list(a.shape), "bytes": a.nbytes}
              for (n, _), a in zip(arrays, blobs, strict=True)]
    head = json.dumps({**header, "tensors": listed}).encode()
    return struct.pack("<I", len(head)) + head + b"".join(a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes() for a in blobs)


def unframe(body: bytes) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    (length,) = struct.unpack_from("<I", body)
    header = json.loads(body[4:4 + length])
    arrays, at = {}, 4 + length
    for t in header.get("tensors") or []:
        dtype = np.dtype(np.bool_ if t["type"] == "bool" else t["type"]).newbyteorder("<")
        arrays[t["name"]] = np.frombuffer(body[at:at + int(t["bytes"])], dtype=dtype).reshape(t["dims"]).copy()
        at += int(t["bytes"])
    return header, arrays


class Bridge:
    """The server, the files it serves (this folder's page and scripts, onnxruntime-web's ``dist`` under ``ort/``,
    and the model files registered), and the job queue. ``call`` gives one job and waits for its answer."""

    def __init__(self, ort_web: Path | None = None) -> None:
        self.token = secrets.token_hex(16)
        self.files: dict[str, Path] = {name: HERE / name for name in ("page.html", "page.mjs", "serve.mjs")}
        self.ort_web = ort_web
        self.jobs: queue.Queue[bytes] = queue.Queue()
        self.answers: queue.Queue[bytes] = queue.Queue()
        self.failure: str | None = None
        self.started = False
        self.alive: Callable[[], str | None] = lambda: None  # why the other end has stopped, or None
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="export-check-js-bridge", daemon=True)
        self.thread.start()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/{self.token}"

    def serve_file(self, path: Path) -> str:
        """``path`` served to the page; its URL."""
        name = f"files/{len(self.files)}-{path.name}"
        self.files[name] = path
        return f"{self.base}/{name}"

    def file_for(self, name: str) -> Path | None:
        if name in self.files:
            return self.files[name]
        if self.ort_web is not None and name.startswith("ort/") and "/" not in name[4:] and not name[4:].startswith("."):
            found = self.ort_web / name[4:]
            return found if found.is_file() else None
        return None

    def _wait(self, timeout: float, what: str) -> bytes:
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.answers.get(timeout=POLL)
            except queue.Empty:
                pass
            stopped = self.failure or self.alive()
            if stopped:
                raise JsError(stopped)
            if time.monotonic() > deadline:
                raise JsError(f"{what} took over {timeout:.0f} s")

    def wait_ready(self) -> dict[str, Any]:
        """The first message of the page or script: the runtime's versions."""
        header, _ = unframe(self._wait(START_TIMEOUT, "starting the JavaScript runtime"))
        self.started = True
        return dict(header.get("versions") or {})

    def call(self, header: dict[str, Any], arrays: list[tuple[str, np.ndarray]] = (), timeout: float = CALL_TIMEOUT  # type: ignore[assignment]
             ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        self.jobs.put(frame(header, list(arrays)))
        answer, out = unframe(self._wait(timeout, f"the job {header.get('op')}"))
        if answer.get("error"):
            raise JsError(str(answer["error"]))
        return answer, out

    def close(self) -> None:
        if self.started and self.failure is None and self.alive() is None:
            self.jobs.put(frame({"op": "exit"}, []))
            time.sleep(0.1)  # the exit job's reply leaves before the server stops
        self.server.shutdown()
        self.server.server_close()


def _handler(bridge: Bridge) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # the replay's progress lines say what matters
            pass

        def _name(self) -> str | None:
            prefix = f"/{bridge.token}/"
            return self.path.split("?")[0][len(prefix):] if self.path.startswith(prefix) else None

        def _send(self, code: int, body: bytes, kind: str = "application/octet-stream") -> None:
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.send_header("Cross-Origin-Opener-Policy", "same-origin")
            self.send_header("Cross-Origin-Embedder-Policy", "require-corp")
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            name = self._name()
            path = None if name is None else bridge.file_for(name)
            if path is None:
                self._send(404, b"")
                return
            kind = "text/javascript" if path.suffix == ".mjs" else mimetypes.guess_type(path.name)[0] or "application/octet-stream"
            self._send(200, path.read_bytes(), "application/wasm" if path.suffix == ".wasm" else kind)

        def do_POST(self) -> None:  # noqa: N802
            name = self._name()
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if name == "fail":
                bridge.failure = body.decode("utf-8", "replace").strip()[:2000] or "the page stopped"
                self._send(200, b"")
            elif name == "job":
                bridge.answers.put(body)
                self._send(200, bridge.jobs.get())
            else:
                self._send(404, b"")

    return Handler


def process_stopped(process: subprocess.Popen[bytes], what: str, log: Path) -> Callable[[], str | None]:
    """Why ``process`` is no longer running (its exit and the last lines it wrote), or None while it runs."""
    def check() -> str | None:
        code = process.poll()
        if code is None:
            return None
        said = [ln.strip() for ln in log.read_text("utf-8", "replace").splitlines() if ln.strip()] if log.is_file() else []
        return f"{what} exited with {code}: {' '.join(said[-3:])[:600] or 'no message'}"
    return check
