"""torchscript-trace: ``torch.jit.trace`` on a batch of real golden inputs."""

from __future__ import annotations

from pathlib import Path

from ._common import TorchScriptRunner, atomic_path
from .base import BuildContext

ACCOUNTS = {"torchscript-trace": "`torch.jit.trace` on a batch of real golden inputs, loaded with `torch.jit.load`"}


def build(ctx: BuildContext, path: Path, source: Path | None) -> dict[str, str]:
    import torch

    args, kwargs = ctx.example_args()
    with torch.no_grad():
        # check_trace=False: the trace is judged on the whole golden set after reloading instead.
        # strict=False: a model may return a dict or a list (a tuple of tensors needs nothing).
        traced = (torch.jit.trace(ctx.model, args[0] if len(args) == 1 else args, check_trace=False, strict=False) if not kwargs
                  else torch.jit.trace(ctx.model, example_kwarg_inputs={**dict(zip(_positional_names(ctx), args, strict=True)), **kwargs},
                                       check_trace=False, strict=False))
    with atomic_path(path) as tmp:
        torch.jit.save(traced, str(tmp))
    return {"example_batch": ", ".join(str(tuple(a.shape)) for a in (*args, *kwargs.values()))}


def _positional_names(ctx: BuildContext) -> list[str]:
    return [i.name for i in ctx.signature.inputs if not i.keyword]


def open_runner(path: Path, ctx: BuildContext) -> TorchScriptRunner:
    return TorchScriptRunner(path, ctx.signature)
