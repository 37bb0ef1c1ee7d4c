"""The per-layer method of TorchScript files (``.pt``): *local*. Forward pre/post hooks record every eager
module's inputs and output; the loaded ScriptModule's submodule of the same qualified name is run on those same
inputs. A module whose own computation changed departs; its parents depart only because it does, and it finishes
first, so the first departing module in execution order is the culprit.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ...artifacts import ArtifactKind, BuildContext
from ...artifacts._common import load_torchscript
from ...records import LayerComparison, LayerDelta
from ..outputs import output_ops, pick, tensors
from ._common import DIVERGENCE, INT8_LAYERS, array_of, capture_eager, finish, layer_delta, save_module_case


def compare(kind: ArtifactKind, path: Path, model: Any, batch: np.ndarray, threshold: float, purpose: str, threads: int,
            start: int, ctx: BuildContext | None = None) -> LayerComparison:
    """The method's entry (``layers.compare_layers``): the submodules run alone, on one thread as the file loads."""
    return torchscript_layers(path, model, batch, threshold, purpose, start=start)


def torchscript_layers(path: Path, model: Any, batch: np.ndarray, threshold: float, purpose: str, start: int = 0) -> LayerComparison:
    """Local comparison: each loaded submodule on eager's own inputs to that module."""
    import torch

    loaded = load_torchscript(path)
    submodules = dict(loaded.named_modules())
    trace = capture_eager(model, batch)
    layers: list[LayerDelta] = []
    repro = None
    for cap in trace.order:
        if purpose == INT8_LAYERS and not cap.leaf:
            continue  # the int8 table is per layer; containers only repeat their children's error
        sub = submodules.get(cap.name)
        if sub is None or cap.inputs is None or cap.output is None:
            continue
        try:
            with torch.inference_mode():
                got = [array_of(t) for t in tensors(sub(*(t.clone() for t in cap.inputs)))]
        except Exception:  # a submodule that cannot run alone (e.g. traced only inside its parent)
            continue
        ops = str(getattr(sub, "original_name", type(sub).__name__))
        # every output it returns, compared (a detector's boxes, an LSTM's state): the first that departs is its row
        deltas = [(k, layer_delta(cap.name, ops, ref.numpy(), value, threshold))
                  for k, (ref, value) in enumerate(zip(cap.outputs, got, strict=False)) if value.shape == tuple(ref.shape)]
        if not deltas:
            continue
        index, delta = pick(deltas)
        if delta.departs and not any(d.departs for d in layers):
            if not cap.leaf:  # its children ran first and agree: what departs is the code of its own forward
                delta = replace(delta, where="forward-code", ops=output_ops("forward", index))
            if purpose == DIVERGENCE:
                repro = save_module_case(path, cap, cap.outputs[index].numpy(), index)
        layers.append(delta)
    method = "torchscript"  # messages.LAYER_METHODS words it
    return replace(finish(purpose, method, "local", start, len(batch), threshold, layers), repro=repro)
