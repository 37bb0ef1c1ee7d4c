"""One cached, torch-free virtual environment per runtime release (``export-check bisect``): numpy, the
release, and this package linked in; made with uv, from the package index pip is configured with.

An environment lives at ``<cache-dir>/runtime-envs/<dist>-<version>-<tag>/`` (the tag names this Python
and what was installed). It is built under a ``.partial-`` name and renamed into place whole, with
``export-check-env.json`` written last: a half-made environment is never used. A run holds a shared
``flock`` on each environment it replays in; :func:`prune_envs` (``export-check cache prune|clear``, and
the end of each bisection) removes the least recently used ones that no run holds until the folder is
under its bound. The package is linked, not copied (``site-packages/export_check`` -> this package's
folder, renewed at each use): an environment replays the export-check that runs the bisection.

uv and not pip: an environment is made in 0.3-0.6 s from uv's cache, its files hard links into that
cache (measured: docs/how-to/replay-on-device.md, "Which runtime release changed it").
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .errors import UsageError

ENVS = "runtime-envs"
MARKER = "export-check-env.json"
INSTALL_TIMEOUT = 900.0
_NAME = re.compile(r"[a-z0-9-]+-[0-9][0-9a-z.]*-cp[0-9]+-[0-9a-f]{8}")


@dataclass(frozen=True)
class Runtime:
    """A runtime that ``bisect`` installs release by release: its distribution on the index, the runtime
    name its artifact kinds carry (``ArtifactKind.runtime``), the module it imports, and the requirements
    each release needs beside it (``(below, requirement)``: a release older than ``below`` needs it)."""

    dist: str
    kind_runtime: str
    module: str
    companions: tuple[tuple[str, str], ...] = ()


# onnxruntime before 1.19 was built against numpy 1.x and fails to import beside numpy 2, yet does not say so in its metadata
RUNTIMES: dict[str, Runtime] = {r.dist: r for r in (
    Runtime("onnxruntime", "onnxruntime", "onnxruntime", (("1.19", "numpy<2"),)),
    Runtime("openvino", "openvino", "openvino"),
    Runtime("ai-edge-litert", "litert", "ai_edge_litert"),
)}


def version_key(version: str) -> tuple[int, ...]:
    """
    >>> sorted(["1.9.0", "1.10.1", "1.10.0"], key=version_key)
    ['1.9.0', '1.10.0', '1.10.1']
    """
    return tuple(int(part) for part in re.findall(r"[0-9]+", version.split("+")[0]))


def requirements(runtime: Runtime, version: str) -> tuple[str, ...]:
    """What an environment of ``runtime`` at ``version`` installs.

    >>> requirements(RUNTIMES["onnxruntime"], "1.18.1"), requirements(RUNTIMES["onnxruntime"], "1.24.1")
    (('onnxruntime==1.18.1', 'numpy<2'), ('onnxruntime==1.24.1', 'numpy'))
    """
    extra = [req for below, req in runtime.companions if version_key(version) < version_key(below)]
    return (f"{runtime.dist}=={version}", *(extra or ["numpy"]))


def find_uv() -> str:
    """The uv executable: on PATH, beside this Python, or the ``uv`` package's; else one line saying how to get it."""
    found = shutil.which("uv") or next((str(p) for p in (Path(sys.executable).parent / "uv",) if p.is_file()), None)
    if found is None:
        with contextlib.suppress(ImportError, FileNotFoundError):
            import uv  # type: ignore[import-not-found, import-untyped, unused-ignore]

            found = str(uv.find_uv_bin())
    if found is None:
        raise UsageError("bisect installs each runtime release with uv, which is not installed here: pip install uv "
                         "(or pip install 'export-check[bisect]')")
    return found


@functools.lru_cache(maxsize=1)
def _pip_config() -> dict[str, str]:
    """pip's settings (``pip config list``: 0.4-1.3 s), read once per process."""
    done = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=120)
    found: dict[str, str] = {}
    for line in done.stdout.splitlines():
        match = re.fullmatch(r"(?::env:|global|install)\.([a-z-]+)='(.*)'", line.strip())
        if match and match.group(1) not in found:
            found[match.group(1)] = match.group(2)
    return found


def uv_environment() -> dict[str, str]:
    """The package sources pip is configured with, as uv reads them (what ``./dev``'s ``uv_sources`` does):
    an ``UV_*`` variable already set wins; pip's rule across indexes (the best version wherever it is)."""
    pip = _pip_config()
    env = {}
    for variable, setting in (("UV_DEFAULT_INDEX", "index-url"), ("UV_INDEX", "extra-index-url"), ("UV_FIND_LINKS", "find-links"),
                              ("SSL_CERT_FILE", "cert")):
        value = os.environ.get(variable) or pip.get(setting, "")
        if value:
            env[variable] = value
    env["UV_INDEX_STRATEGY"] = os.environ.get("UV_INDEX_STRATEGY", "unsafe-best-match")
    return env


def list_releases(dist: str) -> list[str]:
    """Every release of ``dist`` the configured index offers for this Python, oldest first (``pip index versions``)."""
    done = subprocess.run([sys.executable, "-m", "pip", "index", "versions", dist], capture_output=True, text=True, timeout=300)
    match = re.search(r"^Available versions: (.*)$", done.stdout, re.M)
    if done.returncode != 0 or match is None:
        last = (done.stderr.strip().splitlines() or ["no answer"])[-1]
        raise UsageError(f"the package index offers no release of {dist} here ({last}); check pip's index "
                         "(python -m pip config list)")
    return sorted((v.strip() for v in match.group(1).split(",") if v.strip()), key=version_key)


@dataclass(frozen=True)
class RuntimeEnv:
    """An environment of one release, ready (``python`` set) or not (``error``: why it could not install)."""

    dist: str
    version: str
    path: Path
    commands: tuple[str, ...]  # how to make it by hand
    installed: bool  # made by this run (not found in the cache)
    seconds: float  # what making it took (0 when cached)
    error: str | None = None

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"


def env_root(cache_dir: Path) -> Path:
    return cache_dir / ENVS


def _tag(reqs: tuple[str, ...]) -> str:
    base = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    digest = hashlib.sha256(json.dumps([base, sys.version, list(reqs)]).encode()).hexdigest()[:8]
    return f"cp{sys.version_info.major}{sys.version_info.minor}-{digest}"


def _commands(uv: str, python: str, where: Path, reqs: tuple[str, ...], sources: dict[str, str]) -> tuple[str, ...]:
    shown = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(sources.items()))
    return (f"{shown} {shlex.quote(uv)} venv --python {shlex.quote(python)} {shlex.quote(str(where))}",
            f"{shown} {shlex.quote(uv)} pip install --python {shlex.quote(str(where / 'bin' / 'python'))} "
            + " ".join(shlex.quote(r) for r in reqs))


def _link_package(path: Path) -> None:
    """``site-packages/export_check`` -> the running package's folder, replaced atomically."""
    site = next((path / "lib").glob("python*/site-packages"))
    link = site / "export_check"
    fresh = site / f".export_check-{os.getpid()}"
    with contextlib.suppress(FileNotFoundError):
        fresh.unlink()
    fresh.symlink_to(Path(__file__).resolve().parent, target_is_directory=True)
    os.replace(fresh, link)


def ensure_env(cache_dir: Path, dist: str, version: str) -> RuntimeEnv:
    """The environment of ``dist`` at ``version``: from the cache, else made now. An install that fails
    (no wheel for this Python, an index that refuses) is a ``RuntimeEnv`` with ``error``, never an exception."""
    runtime = RUNTIMES[dist]
    reqs = requirements(runtime, version)
    root = env_root(cache_dir)
    where = root / f"{dist}-{version}-{_tag(reqs)}"
    uv, sources = find_uv(), uv_environment()
    base = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    commands = _commands(uv, base, where, reqs, sources)
    if (where / MARKER).is_file():
        _link_package(where)
        return RuntimeEnv(dist, version, where, commands, installed=False, seconds=0.0)
    root.mkdir(parents=True, exist_ok=True)
    partial = root / f".partial-{where.name}-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    started = time.perf_counter()
    # the release's environment is not the project's: a constraints file pinning this Python's onnxruntime (a test
    # environment's UV_CONSTRAINT/PIP_CONSTRAINT) would make every other release unsatisfiable
    unrelated = ("VIRTUAL_ENV", "UV_CONSTRAINT", "PIP_CONSTRAINT", "UV_OVERRIDE")
    env = {**{k: v for k, v in os.environ.items() if k not in unrelated}, **sources}
    try:
        for step in ([uv, "venv", "-q", "--python", base, str(partial)],
                     [uv, "pip", "install", "-q", "--python", str(partial / "bin" / "python"), *reqs],
                     [str(partial / "bin" / "python"), "-c", f"import numpy, {runtime.module}"]):
            done = subprocess.run(step, capture_output=True, text=True, timeout=INSTALL_TIMEOUT, env=env)
            if done.returncode != 0:
                said = [ln.strip() for ln in (done.stderr or done.stdout).splitlines() if ln.strip()]
                what = "does not import" if step[0] != uv else "cannot install on this Python"
                return RuntimeEnv(dist, version, where, commands, installed=False, seconds=time.perf_counter() - started,
                                  error=f"{dist} {version} {what}: {' '.join(said[-3:])[:400] or 'no message'}")
        seconds = time.perf_counter() - started
        _link_package(partial)
        (partial / MARKER).write_text(json.dumps({"dist": dist, "version": version, "requirements": list(reqs), "commands": list(commands),
                                                  "seconds": round(seconds, 3)}, indent=1) + "\n")
        try:
            os.rename(partial, where)
        except OSError:  # another run made it meanwhile: use theirs
            if not (where / MARKER).is_file():
                raise
        else:
            partial = root / "(renamed)"
        _link_package(where)
        return RuntimeEnv(dist, version, where, commands, installed=True, seconds=seconds)
    except subprocess.TimeoutExpired:
        return RuntimeEnv(dist, version, where, commands, installed=False, seconds=time.perf_counter() - started,
                          error=f"{dist} {version} cannot install on this Python: uv took over {INSTALL_TIMEOUT:.0f} s")
    finally:
        shutil.rmtree(partial, ignore_errors=True)


@contextlib.contextmanager
def held(env: RuntimeEnv) -> Iterator[None]:
    """A run's shared hold on ``env`` (pruning skips it) and a touch of its folder (its last use)."""
    fd = os.open(env.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        with contextlib.suppress(OSError):
            os.utime(fd)
        yield
    finally:
        os.close(fd)


@dataclass(frozen=True)
class EnvUse:
    path: Path
    size: int  # bytes of its regular files, links into uv's cache counted (an upper bound of what removing it frees)
    last_used: float


def env_usage(cache_dir: Path) -> list[EnvUse]:
    """Every finished environment under ``cache_dir``, least recently used first."""
    root = env_root(cache_dir)
    if not root.is_dir():
        return []
    found = []
    for entry in sorted(root.iterdir()):
        if not _NAME.fullmatch(entry.name) or entry.is_symlink() or not (entry / MARKER).is_file():
            continue
        size = 0
        for folder, _, files in os.walk(entry):
            for name in files:
                with contextlib.suppress(OSError):
                    st = os.lstat(os.path.join(folder, name))
                    size += st.st_size if not os.path.islink(os.path.join(folder, name)) else 0
        found.append(EnvUse(entry, size, entry.stat().st_mtime))
    return sorted(found, key=lambda e: (e.last_used, str(e.path)))


def prune_envs(cache_dir: Path, limit: int | None) -> tuple[int, int, int]:
    """Remove least recently used environments no run holds until they take at most ``limit`` bytes
    (None: no limit; 0: every one not in use). Returns (removed, bytes freed, kept because in use)."""
    envs = env_usage(cache_dir)
    total, removed, freed, in_use = sum(e.size for e in envs), 0, 0, 0
    for entry in envs:
        if limit is None or total <= limit:
            break
        fd = os.open(entry.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                in_use += 1
                continue
            doomed = entry.path.with_name(f".removing-{entry.path.name}-{os.getpid()}")
            os.rename(entry.path, doomed)  # no run finds it half removed
            shutil.rmtree(doomed)  # links inside are removed, never followed (shutil.rmtree.avoids_symlink_attacks)
        finally:
            os.close(fd)
        removed, freed, total = removed + 1, freed + entry.size, total - entry.size
    return removed, freed, in_use
