"""Where an artifact departs from eager, named by the module's qualified name (``layers.2.conv1``).

One module per per-layer method, named by the kind's row (``ArtifactKind.layers``): ``torchscript`` (local: each
submodule on eager's own inputs), ``onnx``, ``program`` and ``executorch`` (cumulative: every module's value read
out of one run of the whole file). Each provides ``compare(kind, path, model, batch, threshold, purpose, threads,
start, ctx) -> LayerComparison``; what they share is ``_common``'s. A failing float row gets the table where it
diverges (``DIVERGENCE``), an int8 row the same comparison as an error table (``INT8_LAYERS``: SQNR in dB per layer).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Protocol, cast

import numpy as np

from ...artifacts import ArtifactKind, BuildContext
from ...records import LayerComparison
from ._common import DIVERGENCE, INT8_LAYERS

__all__ = ["DIVERGENCE", "INT8_LAYERS", "Method", "compare_layers", "method"]


class Method(Protocol):
    def __call__(self, kind: ArtifactKind, path: Path, model: Any, batch: np.ndarray, threshold: float, purpose: str, threads: int,
                 start: int, ctx: BuildContext | None = None) -> LayerComparison: ...


def method(name: str) -> Method:
    """The per-layer method a kind's row names: the ``compare`` of this folder's module ``name``, imported now (a
    method's runtime loads only when a row needs its table). A name no module here holds raises ``ValueError``."""
    if not name.isidentifier() or name.startswith("_"):
        raise ValueError(f"no per-layer method named {name!r}")
    try:
        module = importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"{__name__}.{name}":
            raise  # the method's own import failed: say which
        raise ValueError(f"no per-layer method named {name!r}") from None
    found = getattr(module, "compare", None)
    if not callable(found):
        raise ValueError(f"no per-layer method named {name!r}: {module.__name__} has no compare")
    return cast(Method, found)


def compare_layers(kind: ArtifactKind, path: Path, model: Any, batch: np.ndarray, threshold: float, purpose: str, threads: int,
                   start: int, ctx: BuildContext | None = None) -> LayerComparison:
    """The per-layer table by the method the kind's row names (``ArtifactKind.layers``); a diagnosis that
    cannot run says why instead of raising. ``ctx``: the run's build context (the ExecuTorch method
    rebuilds the program from it)."""
    try:
        if not kind.layers:
            raise ValueError(f"no per-layer method for {kind.runtime} artifacts")
        return method(kind.layers)(kind, path, model, batch, threshold, purpose, threads, start=start, ctx=ctx)
    except Exception as exc:  # the diagnosis is advice; it must never take the report down
        text = " ".join(str(exc).split())[:300]
        return LayerComparison(purpose=purpose, method="", scope="", batch_start=start, batch_size=len(batch),
                               threshold=threshold, layers=(), first=None, error=f"{type(exc).__name__}: {text}")
