"""A decode kind built to its file, then driven in its runtime in a child interpreter that imports nothing of the model.

The child is forked per file from a host, ``stepper.py`` run as a script under ``python -I`` (no user site, no
current directory on the path) that imported the runtime alone (``StepHosts``), so neither export_check nor the
architecture's modules can be imported there; the request
and the result cross as ``.npz`` files in a private temporary folder. The replay child of
exporter/builder/clean.py serves one ``infer`` per call, a batch at a time; stepping a decoder is
hundreds of calls per prompt that carry the cache from one to the next, so the whole loop runs in
the child and only the logits come back.

``observe`` is one kind's whole observation: built to its file, stepped from it here, and its token verdict taken
(numbers only: the judge decides the row later, decode/run.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..files import FileInfo, file_info
from ..results import ERROR, Row
from . import stepper
from .goldenset import GenerativeSet
from .kinds import DecodeKind
from .reference import Reference
from .rows import ROW_GATES, DecodePath, row_family
from .verdicts import TokenVerdict, runner_disagreement, token_verdict


class SteppingFailed(Exception):
    """The file could not be loaded or stepped in its runtime: the row's error, with the child's last line."""


@dataclass(frozen=True)
class Stepped:
    forced: tuple[np.ndarray, ...]  # per prompt: (P + N, vocab) teacher-forced logits
    generated: tuple[np.ndarray, ...]  # per prompt: (N,) greedy tokens
    seconds: float  # wall time of the child, load included
    runner: tuple[str, ...] | None = None  # per prompt: the text the runtime's own generation runner produced (ExecuTorch's)


class StepHosts:
    """Per runtime (and its extra), a host interpreter, ``python -I stepper.py --serve``, that imported the runtime once
    and forks a child per file it is given (``stepper.serve``): the child steps that file alone, in a process that
    imports nothing of the model, as a fresh interpreter did; a check's files of one runtime pay its import once (torch,
    torchao and ExecuTorch: 1.6, 3.3 and 4.9 s of CPU each). A run holds them for its kinds and closes them at its end."""

    GROUPS = {"torch-export-full": "torch-export", "executorch-runner": "executorch"}  # one host serves both

    def __init__(self) -> None:
        self._hosts: dict[tuple[str, str], subprocess.Popen] = {}

    def __enter__(self) -> StepHosts:
        return self

    def __exit__(self, kind: object, *exc: object) -> None:
        self.close(now=kind is not None)

    def close(self, now: bool = False) -> None:
        """End every host: once its child is done; ``now`` (the run raised, or was interrupted), with its child at once."""
        hosts, self._hosts = self._hosts, {}
        for host in hosts.values():
            (_kill if now else _end)(host)

    def _host(self, runtime: str, extra: str) -> subprocess.Popen:
        key = (self.GROUPS.get(runtime, runtime), extra)
        host = self._hosts.get(key)
        if host is None or host.poll() is not None:
            # a session of its own: a host and every child it forked end together (_kill)
            host = self._hosts[key] = subprocess.Popen([sys.executable, "-I", stepper.__file__, "--serve", *key], stdin=subprocess.PIPE,
                                                       stdout=subprocess.PIPE, bufsize=0, env=_child_env(), start_new_session=True)
        return host

    def run(self, args: list[str], folder: Path, timeout: float) -> tuple[int, str]:
        """``stepper.main(*args)`` (its runtime first, the extra last) in a child of its runtime's host: its exit code and
        output. ``subprocess.TimeoutExpired`` past ``timeout`` seconds (the child killed, the host kept)."""
        output = folder / "output.txt"
        host = self._host(args[0], args[5])
        deadline = time.monotonic() + timeout
        try:
            assert host.stdin is not None
            host.stdin.write((json.dumps([*args, str(output)]) + "\n").encode())
            host.stdin.flush()
            pid = int(_line(host, deadline, "pid"))
        except subprocess.TimeoutExpired:  # not even started within the time: the host is stuck; it ends, with what it forked
            _kill(host)
            raise subprocess.TimeoutExpired(args, timeout) from None
        except (OSError, ValueError, EOFError) as exc:  # the host is gone: this file's error, a new host for the next
            _kill(host)
            return -1, f"the {args[0]} stepping host ended: {exc}"
        try:
            code = int(_line(host, deadline, "exit"))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired, ValueError, EOFError):
                _line(host, time.monotonic() + 10, "exit")  # the host reaps it, and serves the next file
            raise subprocess.TimeoutExpired(args, timeout) from None
        except (ValueError, EOFError) as exc:
            _kill(host)
            return -1, f"the {args[0]} stepping host ended: {exc}"
        return code, output.read_text(encoding="utf-8", errors="replace") if output.is_file() else ""


def _line(host: subprocess.Popen, deadline: float, word: str) -> str:
    """The host's next line, ``WORD VALUE``: its value; TimeoutExpired at ``deadline``, EOFError when the host ended."""
    assert host.stdout is not None
    fd, got = host.stdout.fileno(), b""
    while not got.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise subprocess.TimeoutExpired(word, 0)
        chunk = os.read(fd, 1)
        if not chunk:
            raise EOFError("no reply")
        got += chunk
    said, _, value = got.decode().strip().partition(" ")
    if said != word:
        raise ValueError(f"said {got.decode().strip()!r}, not {word}")
    return value


def _end(host: subprocess.Popen) -> None:
    """Close a host's stdin (it ends after its current child) and wait; kill one that does not end."""
    with contextlib.suppress(OSError):
        host.stdin.close()  # type: ignore[union-attr]
    try:
        host.wait(timeout=10)
    except subprocess.TimeoutExpired:
        _kill(host)
    with contextlib.suppress(OSError):
        host.stdout.close()  # type: ignore[union-attr]


def _kill(host: subprocess.Popen) -> None:
    """End a host and whatever child it forked (its session's process group), now."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(host.pid, signal.SIGKILL)
    host.wait()
    for stream in (host.stdin, host.stdout):
        with contextlib.suppress(OSError):
            stream.close()  # type: ignore[union-attr]


def step_file(kind: DecodeKind, path: Path, prompts: list[np.ndarray], approved: list[np.ndarray], new_tokens: int,
              cache_shape: tuple[int, ...], hosts: StepHosts, timeout: float = 600.0, texts: list[str] | None = None,
              tokenizer: Path | None = None) -> Stepped:
    with tempfile.TemporaryDirectory(prefix="export-check-decode-") as folder:
        request, result = Path(folder) / "request.npz", Path(folder) / "result.npz"
        arrays: dict[str, Any] = {f"prompt_{i}": np.asarray(p, np.int64) for i, p in enumerate(prompts)}
        arrays.update({f"approved_{i}": np.asarray(a, np.int64) for i, a in enumerate(approved)})
        if texts is not None and tokenizer is not None:  # for a runtime's own runner, which reads text
            arrays.update(texts=np.asarray(texts), tokenizer=np.asarray(str(tokenizer)))
        np.savez(request, prompts=len(prompts), new_tokens=new_tokens, **arrays)
        args = [kind.runtime, str(path), str(request), str(result), ",".join(str(n) for n in cache_shape), kind.stepper_extra]
        began = time.perf_counter()
        try:
            code, output = hosts.run(args, Path(folder), timeout)
        except subprocess.TimeoutExpired:
            raise SteppingFailed(f"stepping {path.name} was still running after {timeout:g} s") from None
        seconds = time.perf_counter() - began
        if code != 0:
            lines = [line for line in output.splitlines() if line.strip()]
            raise SteppingFailed(f"stepping {path.name} in {kind.runtime} failed (exit {code}): "
                                 f"{lines[-1] if lines else 'no message'}")
        with np.load(result) as loaded:
            leaked = str(loaded["leaked"])
            if leaked:
                raise SteppingFailed(f"stepping {path.name} imported {leaked}: the file needs the architecture to run")
            forced = tuple(loaded[f"forced_{i}"] for i in range(len(prompts)))
            generated = tuple(loaded[f"generated_{i}"] for i in range(len(prompts)))
            runner = tuple(str(loaded[f"runner_{i}"]) for i in range(len(prompts))) if "runner_0" in loaded.files else None
    return Stepped(forced, generated, seconds, runner)


def _child_env() -> dict[str, str]:
    """The stepping child's environment: the run's (``-I`` already ignores PYTHONPATH and the user's site), so that what
    narrows or pins the kernels here (ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA, OpenBLAS's settings) computes there too,
    with one OpenMP thread as every replay runs."""
    import os

    return {**os.environ, "OMP_NUM_THREADS": "1"}


@dataclass(frozen=True)
class Observed:
    """A row's numbers before its judge: the verdict, and what the judge reads beside it."""

    name: str
    family: str  # the decode gate family (gates.GATES)
    against: str
    verdict: TokenVerdict
    path: DecodePath  # its single_forward_passed is the full-forward row's status, set when the rows are judged in order
    standing: tuple[str, ...] = ()  # reasons no gate decides: the runtime's own runner disagreeing
    extra: tuple[tuple[str, str], ...] = ()
    artifact: FileInfo | None = None
    build_seconds: float | None = None
    replay_seconds: float | None = None
    notes: tuple[str, ...] = ()


def observe(kind: DecodeKind, model: Any, golden: GenerativeSet, eager: Reference, out_dir: Path, bugs: dict[str, Any],
            shape: tuple[int, ...], decode: Callable, hosts: StepHosts) -> Observed | Row:
    """A kind built and stepped from its file (in a child of its runtime's host in ``hosts``), and its verdict; a Row (an
    error) when it could not be built or stepped. A decode step is built with the planted ``bugs`` (the tests') and the
    static cache of ``shape``."""
    family = row_family(kind.family)
    needed = max(len(p) for p in eager.prompts) + golden.new_tokens
    is_step = kind.name != "full-forward"
    length = shape[2] if is_step else None  # the steps' static cache: the longest prompt + continuation, or the plant's
    path = out_dir / f"{kind.name}{kind.suffix}"
    began = time.perf_counter()
    try:
        with warnings.catch_warnings(record=True) as caught:  # an exporter's warnings are the row's notes, never its failure
            warnings.simplefilter("always")
            kind.build(model, length or needed, path, bugs if is_step else {})
    except Exception as exc:
        return Row(kind.name, family, "eager", ERROR, ROW_GATES[family], None, (f"build failed: {type(exc).__name__}: {str(exc).splitlines()[0]}",))
    built = time.perf_counter() - began
    runner_reads = kind.runtime == "executorch-runner" and golden.tokenizer is not None and None not in golden.texts
    try:
        stepped = step_file(kind, path, eager.prompts, eager.approved, golden.new_tokens, shape if is_step else (), hosts,
                            texts=list(golden.texts) if runner_reads else None, tokenizer=golden.tokenizer)  # type: ignore[arg-type]
    except SteppingFailed as exc:
        return Row(kind.name, family, "eager", ERROR, ROW_GATES[family], None, (str(exc),), artifact=file_info(path), build_seconds=built)
    verdict = token_verdict(eager.names, eager.prompts, eager.approved, eager.logits, eager.generated, stepped.forced, stepped.generated, decode)
    disagree = runner_disagreement(eager.names, stepped.runner, stepped.generated, decode, model.config.eos_token_id)
    notes = tuple(dict.fromkeys(f"{w.category.__name__}: {str(w.message).splitlines()[0]}" for w in caught))
    if kind.runtime == "executorch-runner" and not runner_reads:
        notes += ("ExecuTorch's runner reads text prompts with a tokenizer; this set's prompts are token ids: only the stepped loop is judged",)
    extra: tuple[tuple[str, str], ...] = ()
    if stepped.runner is not None:
        raised = [(n, t[1:]) for n, t in zip(eager.names, stepped.runner, strict=True) if t.startswith("\0")]
        compared = len(eager.names) - len(raised)
        extra = (("runner_agrees", "no: see the reasons" if disagree else f"{compared}/{compared} prompts"),)
        # the runner's own failure (not the file's): a visible note, the prompt not compared there
        notes += tuple(f"ExecuTorch's runner raised on prompt {n}, not compared there: {why}" for n, why in raised)
    return Observed(kind.name, kind.family, "eager", verdict, DecodePath(is_step, length, None, needed), disagree, extra,
                    artifact=file_info(path), build_seconds=built, replay_seconds=stepped.seconds, notes=notes)
