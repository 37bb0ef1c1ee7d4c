"""torchscript-script: ``torch.jit.script``, which compiles Python control flow instead of recording one path."""

from __future__ import annotations

from pathlib import Path

from ._common import TorchScriptRunner, atomic_path
from .base import BuildContext

ACCOUNTS = {"torchscript-script": "`torch.jit.script` (keeps Python control flow)"}


def build(ctx: BuildContext, path: Path, source: Path | None) -> dict[str, str]:
    import torch

    scripted = torch.jit.script(ctx.model)
    with atomic_path(path) as tmp:
        torch.jit.save(scripted, str(tmp))
    return {}


def open_runner(path: Path, ctx: BuildContext) -> TorchScriptRunner:
    return TorchScriptRunner(path, ctx.signature)
