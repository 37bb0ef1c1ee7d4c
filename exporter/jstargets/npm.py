"""The npm packages of the JavaScript targets (onnxruntime-node, onnxruntime-web), pinned by exact version in the
``package.json`` and ``package-lock.json`` shipped beside this module, installed once per lock file into
``<cache-dir>/js-runtimes/<sha256 of the lock, 12>/`` with ``npm ci`` from the registry npm is configured with.

Like ``runtime_envs``: made under a ``.partial-`` name and renamed into place whole, a marker written last, so a
half-made folder is never used. ``--ignore-scripts``: onnxruntime-node's install script fetches CUDA libraries from
outside the registry; the CPU libraries the target runs ship in the package itself.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
FOLDER = "js-runtimes"
MARKER = "export-check-js.json"
INSTALL_TIMEOUT = 900.0
NPM_CI = ("ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error")


@dataclass(frozen=True)
class JsPackages:
    """The installed packages (``modules``: their ``node_modules``), or why they could not be (``error``)."""

    path: Path
    commands: tuple[str, ...]  # how to make the folder by hand
    installed: bool  # made by this run
    seconds: float
    error: str | None = None

    @property
    def modules(self) -> Path:
        return self.path / "node_modules"


def pinned() -> dict[str, str]:
    """The npm packages and their exact versions (the shipped package.json).

    >>> sorted(pinned())
    ['onnxruntime-node', 'onnxruntime-web']
    """
    return dict(json.loads((HERE / "package.json").read_text())["dependencies"])


def packages_folder(cache_dir: Path) -> Path:
    digest = hashlib.sha256((HERE / "package-lock.json").read_bytes() + (HERE / "package.json").read_bytes()).hexdigest()[:12]
    return cache_dir / FOLDER / digest


def ensure_packages(cache_dir: Path) -> JsPackages:
    """The pinned packages under ``cache_dir``: from the cache, else installed now with ``npm ci``. A failed install
    (no npm, a registry that refuses) is a ``JsPackages`` with ``error`` in npm's words, never an exception."""
    where = packages_folder(cache_dir)
    commands = (f"mkdir -p {shlex.quote(str(where))}",
                f"cp {shlex.quote(str(HERE / 'package.json'))} {shlex.quote(str(HERE / 'package-lock.json'))} {shlex.quote(str(where))}/",
                f"cd {shlex.quote(str(where))} && npm {' '.join(NPM_CI)}")
    if (where / MARKER).is_file():
        os.utime(where)  # its last use
        return JsPackages(where, commands, installed=False, seconds=0.0)
    npm = shutil.which("npm")
    if npm is None:
        return JsPackages(where, commands, False, 0.0, "npm is not installed here (apt-get install nodejs npm)")
    partial = where.with_name(f".partial-{where.name}-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    started = time.perf_counter()
    try:
        for name in ("package.json", "package-lock.json"):
            shutil.copyfile(HERE / name, partial / name)
        try:
            done = subprocess.run([npm, *NPM_CI], cwd=partial, capture_output=True, text=True, timeout=INSTALL_TIMEOUT)
        except subprocess.TimeoutExpired:
            return JsPackages(where, commands, False, time.perf_counter() - started, f"npm ci took over {INSTALL_TIMEOUT:.0f} s")
        seconds = time.perf_counter() - started
        if done.returncode != 0:
            said = [ln.strip() for ln in (done.stderr or done.stdout).splitlines() if ln.strip()]
            return JsPackages(where, commands, False, seconds, f"npm ci failed: {' '.join(said[-3:])[:400] or 'exit ' + str(done.returncode)}")
        (partial / MARKER).write_text(json.dumps({"packages": pinned(), "commands": list(commands), "seconds": round(seconds, 3)}) + "\n")
        try:
            os.rename(partial, where)
        except OSError:  # another run installed it meanwhile: use theirs
            if not (where / MARKER).is_file():
                raise
        return JsPackages(where, commands, installed=True, seconds=seconds)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
