"""run/explain.py: the reduction's judge measures a tensor inside the graph by only the streams its gate bounds, and a
graph output by every one (its CTC agreement is a stream)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from export_check.gates import Gate
from export_check.run.explain import Explainer
from export_check.signature import OutputSpec


def _judge(gate: Gate, outputs: tuple[OutputSpec, ...] = ()):
    held = SimpleNamespace(golden=SimpleNamespace(signature=SimpleNamespace(outputs=outputs)))
    return Explainer._judge(held, gate)  # type: ignore[arg-type]


def test_an_inner_tensor_is_judged_on_the_streams_its_gate_bounds_and_no_other() -> None:
    reference, turned = np.array([[1.0, 0.0, 0.0]]), np.array([[0.0, 0.1, 0.0]])  # MAE 1.1/3, cosine 0
    # a gate on the MAE alone: the tensor fails it, and neither cosine nor SNR was measured for it
    failed = _judge(Gate(max_mae=0.1))("inner", reference, turned)
    assert failed is not None and failed.mae == pytest.approx(1.1 / 3) and failed.stat("cosine") is None and failed.stat("snr_db") is None
    # a gate that bounds the cosine: the same tensor passes its MAE bound and fails on the cosine, measured (0)
    on_cosine = _judge(Gate(max_mae=1.0, min_cosine=0.9))("inner", reference, turned)
    assert on_cosine is not None and on_cosine.stat("cosine") == 0.0 and on_cosine.stat("snr_db") is None
    # the same gate on a tensor whose direction holds: nothing fails
    assert _judge(Gate(max_mae=1.0, min_cosine=0.9))("inner", reference, reference * 1.01) is None


def test_a_graph_output_is_measured_by_every_stream_whatever_the_gate() -> None:
    reference, turned = np.array([[1.0, 0.0, 0.0]]), np.array([[0.0, 0.1, 0.0]])
    failed = _judge(Gate(max_mae=0.1), (OutputSpec("logits", kind="values"),))("logits", reference, turned)
    assert failed is not None and failed.stat("cosine") == 0.0 and failed.stat("snr_db") is not None
