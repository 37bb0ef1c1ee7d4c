"""torch-export: ``torch.export`` (batch and declared axes dynamic) saved as a ``.pt2`` with
``torch.export.save``; reloaded with ``torch.export.load`` and run as ``.module()``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ._common import TorchModuleRunner, atomic_path, native_warnings
from ._program import export_inputs, export_program
from .base import BuildContext

ACCOUNTS = {"torch-export": "`torch.export.export` (non-strict) with the batch axis and every declared dynamic axis dynamic, from an example of "
                            "≥ 2 samples (one sample would specialise the batch axis to 1); saved with `torch.export.save`, loaded with "
                            "`torch.export.load(...).module()`; an error when the program's guards pin an axis (checked on the example doubled "
                            "along every dynamic axis)"}


def build(ctx: BuildContext, path: Path, source: Path | None) -> dict[str, str]:
    import torch

    program = export_program(ctx)
    with atomic_path(path) as tmp:
        torch.export.save(program, str(tmp))
    args, kwargs, _ = export_inputs(ctx)
    return {"example_batch": ", ".join(str(tuple(a.shape)) for a in (*args, *kwargs.values())), "strict": "False"}


class ProgramRunner(TorchModuleRunner):
    """A ``.pt2`` reloaded with ``torch.export.load``, run as its ``.module()``."""

    def load(self, path: Path) -> Any:
        import torch

        with native_warnings():
            return torch.export.load(str(path)).module()


def open_runner(path: Path, ctx: BuildContext) -> ProgramRunner:
    return ProgramRunner(path, ctx.signature)
