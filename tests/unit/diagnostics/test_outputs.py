"""Every tensor a module returns, flattened in the signature's order, and one row per module (issue 44, item 2)."""

from __future__ import annotations

import math
from collections import namedtuple

import numpy as np
import torch

from export_check.diagnostics.layers._common import layer_delta
from export_check.diagnostics.outputs import graph_value, pick, tensors


def test_tensors_flatten_tuples_dicts_named_tuples_and_nesting_in_order() -> None:
    a, b, c, d = (torch.full((1,), float(i)) for i in range(4))
    pair = namedtuple("Pair", "h c")
    assert [float(t) for t in tensors((a, (b, c)))] == [0.0, 1.0, 2.0]  # an LSTM's (out, (h, c))
    assert [float(t) for t in tensors({"scores": a, "boxes": b, "extra": [c, pair(d, a)]})] == [0.0, 1.0, 2.0, 3.0, 0.0]
    assert tensors(a)[0] is a and tensors(None) == () and tensors(("text", 3)) == ()


def test_a_later_departing_output_is_the_modules_row_and_named() -> None:
    ref = np.ones((2, 4), np.float32)
    same = layer_delta("head", "Gemm", ref, ref, 1e-5)
    off = layer_delta("head", "Gemm", ref, ref * 1.01, 1e-5)
    index, row = pick([(0, same), (1, off), (2, off)])
    assert index == 1 and row.departs and row.ops == "Gemm, output 1" and math.isclose(row.mae, 0.01, rel_tol=1e-5)
    index, row = pick([(0, same), (1, same)])
    assert index == 0 and not row.departs and row.ops == "Gemm"


def test_the_models_outputs_are_the_graphs_in_order_when_their_shapes_agree() -> None:
    results = {"logits": np.zeros((2, 10), np.float32), "boxes": np.ones((2, 4), np.float32), "ids": np.zeros((2, 4), np.int64)}
    assert graph_value(["logits", "boxes"], results, 1, (2, 4)) is results["boxes"]
    assert graph_value(["logits", "boxes"], results, 1, (2, 5)) is None  # another shape: not that output
    assert graph_value(["logits", "ids"], results, 1, (2, 4)) is None and graph_value(["logits"], results, 1, (2, 4)) is None
