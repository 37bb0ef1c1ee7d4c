"""One JavaScript target of a replay (``export-check replay BUNDLE --target node|browser``): which rows it runs
(the onnxruntime rows), why it cannot run here (no Node, no Chromium, the npm packages not installable: the rows
are then not applicable with that reason), the Node process or headless Chromium page it starts once, and a runner
per artifact that keeps the runner contract (``infer(feeds) -> outputs``) over the bridge. The session is pinned
as the Python runner pins it (``OnnxRunner``): intra-op threads of the check, one inter-op thread, sequential,
the kind's graph optimisation level; onnxruntime-web runs one WebAssembly thread.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..pinned import ORT_EXECUTION_MODE, ORT_GRAPH_OPTIMIZATION, ORT_INTER_OP_THREADS
from ..signature import SINGLE, Signature
from .bridge import CHROMIUM_FLAGS, HERE, Bridge, JsError, process_stopped
from .npm import JsPackages, ensure_packages, pinned

Progress = Callable[[str], None]
ORT_RUNTIME = "onnxruntime"  # the ArtifactKind.runtime of the rows a JavaScript target runs
CHROMIUMS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


@dataclass(frozen=True)
class JsKind:
    """A JavaScript target: its name on the command line, the npm package it runs, the program it needs."""

    name: str
    package: str
    program: str
    install: str  # how to get the program on Debian


JS_TARGETS = {t.name: t for t in (
    JsKind("node", "onnxruntime-node", "node", "apt-get install nodejs npm"),
    JsKind("browser", "onnxruntime-web", "chromium", "apt-get install chromium"),
)}


def find_program(kind: JsKind) -> str | None:
    return shutil.which("node") if kind.program == "node" else next((p for name in CHROMIUMS if (p := shutil.which(name))), None)


class JsRunner:
    """An ONNX file in a session of the JavaScript runtime, fed by input name (the contract of ``OnnxRunner``)."""

    _ids = itertools.count()

    def __init__(self, bridge: Bridge, url: str, name: str, threads: int, level: str, signature: Signature) -> None:
        self.bridge, self.url, self.name, self.threads, self.level, self.signature = bridge, url, name, threads, level, signature
        self.session = f"s{next(self._ids)}"
        self.input_names: list[str] = []
        self.output_names: list[str] = []

    def __enter__(self) -> JsRunner:
        options = {"intraOpNumThreads": self.threads, "interOpNumThreads": ORT_INTER_OP_THREADS, "executionMode": ORT_EXECUTION_MODE,
                   "graphOptimizationLevel": self.level, "logSeverityLevel": 4}
        answer, _ = self.bridge.call({"op": "open", "session": self.session, "model": self.url, "options": options})
        self.input_names, self.output_names = list(answer["inputs"]), list(answer["outputs"])
        if self.signature is SINGLE and len(self.input_names) != 1:
            raise JsError(f"{self.name} has {len(self.input_names)} inputs; export-check feeds exactly one")
        if self.signature is not SINGLE and sorted(self.input_names) != sorted(self.signature.input_names):
            raise JsError(f"{self.name} takes inputs {', '.join(self.input_names)}, the golden set has {', '.join(self.signature.input_names)}")
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(JsError):
            self.bridge.call({"op": "close", "session": self.session}, timeout=30.0)

    def infer(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.signature is SINGLE:
            arrays = [(self.input_names[0], np.asarray(next(iter(feeds.values()))))]
        else:
            arrays = [(n, np.asarray(feeds[n])) for n in self.input_names]
        _, out = self.bridge.call({"op": "run", "session": self.session}, arrays)
        return {name: out[name] for name in self.output_names}


class JsTarget:
    """``--target node`` or ``--target browser`` for one replay: started at its first ONNX row, stopped with the replay."""

    def __init__(self, kind: JsKind, cache_dir: Path, progress: Progress) -> None:
        self.kind, self.cache_dir, self.progress = kind, cache_dir, progress
        self.packages: JsPackages | None = None
        self.bridge: Bridge | None = None
        self.runtime_versions: dict[str, str] = {}
        self.program_version = ""

    def missing(self, runtime: str, artifact: str) -> str | None:
        """Why the row ``artifact`` (of ``runtime``) is not run on this target, or None."""
        if runtime != ORT_RUNTIME:
            return f"the {self.kind.name} target runs the onnxruntime rows only (in {self.kind.package})"
        if find_program(self.kind) is None:
            return f"{self.kind.program} is not installed here ({self.kind.install})"
        if self.packages is None:
            self.progress(f"replay on {self.kind.name}: {', '.join(f'{k} {v}' for k, v in pinned().items())} (npm ci, cached)")
            self.packages = ensure_packages(self.cache_dir)
            for command in self.packages.commands if self.packages.installed else ():
                self.progress(f"  {command}")
        return self.packages.error

    def _start(self, stack: contextlib.ExitStack) -> Bridge:
        assert self.packages is not None
        program = find_program(self.kind)
        assert program is not None
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"export-check-{self.kind.name}-")))
        log = scratch / "log.txt"
        bridge = Bridge(self.packages.modules / "onnxruntime-web" / "dist" if self.kind.name == "browser" else None)
        if self.kind.name == "node":
            argv = [program, str(HERE / "node.mjs"), bridge.base, str(self.packages.modules)]
        else:
            argv = [program, *CHROMIUM_FLAGS, f"--user-data-dir={scratch / 'profile'}", f"{bridge.base}/page.html"]
        self.program_version = _version(program)
        try:
            with open(log, "wb") as sink:  # its own process group: Chromium's renderers are stopped with it
                process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
        except OSError:
            bridge.close()
            raise
        stack.callback(_shutdown, bridge, process, 2.0 if self.kind.name == "node" else 0.0)  # a page stays open: no grace
        bridge.alive = process_stopped(process, self.kind.program, log)
        self.runtime_versions = bridge.wait_ready()
        self.bridge = bridge
        return bridge

    def open_row(self, errors: dict[str, str], kind: Any, path: Path, ctx: Any, stack: contextlib.ExitStack) -> JsRunner | None:
        """The runner of one onnxruntime row (``kind`` at ``path``), or None and the row's error in the runtime's words."""
        level = getattr(kind.open_runner(path, ctx), "graph_optimization", None)  # the Python runner, not entered: its pinned level
        try:
            return self.open(path, level, ctx.threads, ctx.signature, stack)
        except (JsError, OSError) as exc:
            errors[kind.name] = f"reloading {path.name} in {self.kind.package} failed: {exc}"
            return None

    def open(self, path: Path, level: str | None, threads: int, signature: Signature, stack: contextlib.ExitStack) -> JsRunner:
        """A runner of the ONNX file at ``path`` (its ``.data`` beside it), in the target's runtime (started now if not yet)."""
        bridge = self.bridge or self._start(stack)
        url = str(path) if self.kind.name == "node" else bridge.serve_file(path)
        return stack.enter_context(JsRunner(bridge, url, path.name, threads, level or ORT_GRAPH_OPTIMIZATION, signature))

    def versions(self) -> dict[str, str]:
        found = {self.kind.package: pinned()[self.kind.package], self.kind.program: self.program_version}
        return {k: v for k, v in found.items() if v}

    def note(self) -> str:
        where = "Node" if self.kind.name == "node" else "headless Chromium (WebAssembly, one thread)"
        return (f"the onnxruntime rows ran in {self.kind.package} {pinned()[self.kind.package]} in {where}"
                + (f", its npm packages in {self.packages.path}" if self.packages is not None and self.packages.error is None else ""))


def _version(program: str) -> str:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        done = subprocess.run([program, "--version"], capture_output=True, text=True, timeout=60)
        words = done.stdout.split()
        return next((w for w in words if w.removeprefix("v")[:1].isdigit()), "")  # "v20.20.2"; "Chromium 150.0.7871.100 built on ..."
    return ""


def _exited(process: subprocess.Popen[bytes]) -> bool:
    """Whether ``process`` has exited, without reaping it (while it is a zombie its group id stays ours)."""
    if process.returncode is not None:
        return True
    try:
        return os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is not None
    except ChildProcessError:
        return True


def _shutdown(bridge: Bridge, process: subprocess.Popen[bytes], grace: float) -> None:
    """The exit job (Node leaves on it within ``grace``), the server stopped, then the process group ended: SIGTERM, then
    SIGKILL, each to the whole group while its leader is not yet reaped, so no other process can hold that group id."""
    bridge.close()
    for sig, wait in ((None, grace), (signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
        if process.returncode is not None:
            return  # reaped already (it stopped during the replay): its group id is no longer known to be ours
        if sig is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, sig)
        end = time.monotonic() + wait
        while not _exited(process) and time.monotonic() < end:
            time.sleep(0.05)
        if _exited(process):
            break
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)  # what it left in its group (Chromium's renderers and zygotes)
    process.wait()
