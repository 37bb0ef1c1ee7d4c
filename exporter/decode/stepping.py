"""A decode kind built to its file, then driven in its runtime in a child interpreter that imports nothing of the model.

The child is ``stepper.py`` run as a script under ``python -I`` (no user site, no current directory on
the path), so neither export_check nor the architecture's modules can be imported there; the request
and the result cross as ``.npz`` files in a private temporary folder. The replay child of
exporter/builder/clean.py serves one ``infer`` per call, a batch at a time; stepping a decoder is
hundreds of calls per prompt that carry the cache from one to the next, so the whole loop runs in
the child and only the logits come back.

``observe`` is one kind's whole observation: built to its file, stepped from it here, and its token verdict taken
(numbers only: the judge decides the row later, decode/run.py).
"""

from __future__ import annotations

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


def step_file(kind: DecodeKind, path: Path, prompts: list[np.ndarray], approved: list[np.ndarray], new_tokens: int,
              cache_shape: tuple[int, ...], timeout: float = 600.0, texts: list[str] | None = None, tokenizer: Path | None = None) -> Stepped:
    with tempfile.TemporaryDirectory(prefix="export-check-decode-") as folder:
        request, result = Path(folder) / "request.npz", Path(folder) / "result.npz"
        arrays: dict[str, Any] = {f"prompt_{i}": np.asarray(p, np.int64) for i, p in enumerate(prompts)}
        arrays.update({f"approved_{i}": np.asarray(a, np.int64) for i, a in enumerate(approved)})
        if texts is not None and tokenizer is not None:  # for a runtime's own runner, which reads text
            arrays.update(texts=np.asarray(texts), tokenizer=np.asarray(str(tokenizer)))
        np.savez(request, prompts=len(prompts), new_tokens=new_tokens, **arrays)
        command = [sys.executable, "-I", stepper.__file__, kind.runtime, str(path), str(request), str(result),
                   ",".join(str(n) for n in cache_shape), kind.stepper_extra]
        began = time.perf_counter()
        try:
            done = subprocess.run(command, capture_output=True, text=True, encoding="utf-8", errors="replace", timeout=timeout,
                                  env=_child_env())
        except subprocess.TimeoutExpired:
            raise SteppingFailed(f"stepping {path.name} was still running after {timeout:g} s") from None
        seconds = time.perf_counter() - began
        if done.returncode != 0:
            lines = [line for line in done.stderr.splitlines() if line.strip()]
            raise SteppingFailed(f"stepping {path.name} in {kind.runtime} failed (exit {done.returncode}): "
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
            shape: tuple[int, ...], decode: Callable) -> Observed | Row:
    """A kind built and stepped from its file, and its verdict; a Row (an error) when it could not be built or stepped.
    A decode step is built with the planted ``bugs`` (the tests') and the static cache of ``shape``."""
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
        stepped = step_file(kind, path, eager.prompts, eager.approved, golden.new_tokens, shape if is_step else (),
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
