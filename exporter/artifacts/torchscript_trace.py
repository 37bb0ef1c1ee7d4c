"""torchscript-trace: ``torch.jit.trace`` on a batch of real golden inputs."""

from __future__ import annotations

from pathlib import Path

from ._common import TorchScriptRunner, atomic_path
from .base import BuildContext


def build(ctx: BuildContext, path: Path, source: Path | None) -> dict[str, str]:
    import torch

    with torch.no_grad():
        # check_trace=False: the trace is judged on the whole golden set after reloading instead.
        traced = torch.jit.trace(ctx.model, ctx.example, check_trace=False)
    with atomic_path(path) as tmp:
        torch.jit.save(traced, str(tmp))
    return {"example_batch": str(tuple(ctx.example.shape))}


def open_runner(path: Path, ctx: BuildContext) -> TorchScriptRunner:
    return TorchScriptRunner(path)
