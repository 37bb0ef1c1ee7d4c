"""Every tensor a module returns, for the per-layer tables and the reducer (issue 44, item 2).

A detector's model returns ``(logits, boxes)``, an LSTM ``(out, (h, c))``: a table that compares only the
first tensor of each module misses a fault on any other output ("no module departs from eager" while the
second output fails its gate). Here a module's output is flattened, in the order ``torch.utils._pytree``
flattens it (a tuple's items, a dict's values, nested), as the signature names the model's own outputs,
and one module's several comparisons become its one row: the first output that departs, else the first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from ..records import LayerDelta


def tensors(value: Any) -> tuple[Any, ...]:
    """The tensors of a module's output, flattened (tuple, list, dict, named tuple, nested); () for none."""
    import torch

    if isinstance(value, torch.Tensor):
        return (value,)
    if isinstance(value, dict):
        value = tuple(value.values())
    if isinstance(value, (tuple, list)):
        return tuple(t for item in value for t in tensors(item))
    return ()


def output_ops(ops: str, index: int) -> str:
    """What ran a module, with the output that departs when it is not the first: ``"Mul, output 1"``.

    >>> output_ops("Gemm", 0), output_ops("forward", 2)
    ('Gemm', 'forward, output 2')
    """
    return ops if index == 0 else f"{ops}, output {index}"


def pick(deltas: Sequence[tuple[int, LayerDelta]]) -> tuple[int, LayerDelta]:
    """One module's row from the comparisons of its outputs (index, delta): the first that departs, else the first.
    A later output's row names its index in ``ops`` (``output_ops``)."""
    index, delta = next(((i, d) for i, d in deltas if d.departs), deltas[0])
    return index, replace(delta, ops=output_ops(delta.ops, index))


def graph_value(names: Sequence[str], results: dict[str, Any], index: int, shape: tuple[int, ...]) -> np.ndarray | None:
    """The model's ``index``-th output as the graph computed it: its ``index``-th graph output (the exporters keep the
    flattened order), when it holds eager's shape."""
    if index >= len(names):
        return None
    value = results.get(names[index])
    return value if isinstance(value, np.ndarray) and value.shape == shape and value.dtype.kind == "f" else None
