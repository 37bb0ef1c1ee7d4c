"""Drive a reloaded decode artifact in its runtime, in a child interpreter that imports nothing of the model.

The child is ``stepper.py`` run as a script under ``python -I`` (no user site, no current directory on
the path), so neither export_check nor the architecture's modules can be imported there; the request
and the result cross as ``.npz`` files in a private temporary folder. The replay child of
exporter/builder/clean.py serves one ``infer`` per call, a batch at a time; stepping a decoder is
hundreds of calls per prompt that carry the cache from one to the next, so the whole loop runs in
the child and only the logits come back.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import stepper
from .kinds import DecodeKind


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
