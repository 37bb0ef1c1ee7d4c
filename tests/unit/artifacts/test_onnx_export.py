"""The legacy ONNX export keeps no activation for a backward pass (artifacts/onnx_export.py; issue 43): the exporter
traces with autograd on, which kept every activation of the example batch until the export returned (at 92 M
parameters and batch 16, about 1.5 GB of the export's 2.6 GB). Saved tensors are dropped instead; grad mode stays
on, so a model that takes another path without it (torch's TransformerEncoderLayer: a native fast path with no ONNX
form) exports as before, to the same bytes."""

from __future__ import annotations

import gc
import io
import weakref
from pathlib import Path

import pytest
import torch
from torch import nn

from export_check.artifacts import onnx_export
from export_check.artifacts.base import BuildContext

ARGS = {"dynamo": False, "opset_version": 17, "input_names": ["input"], "output_names": ["logits"], "do_constant_folding": True}


def _encoder() -> nn.Module:
    torch.manual_seed(0)
    return nn.TransformerEncoder(nn.TransformerEncoderLayer(32, 4, 64, batch_first=True), 2).eval()


@pytest.mark.filterwarnings("ignore")  # the exporter's deprecation and the tracer's warnings (a build collects them as notes)
def test_the_file_is_the_plain_exports_byte_for_byte_grad_mode_kept(tmp_path: Path) -> None:
    model, example = _encoder(), torch.randn(2, 5, 32)
    ctx = BuildContext(model=model, example=example, opset=17, onnx_exporter="torchscript", threads=1)
    axes = ctx.dynamic_axes()
    assert axes == {"input": {0: "batch"}, "logits": {0: "batch"}}
    plain = io.BytesIO()
    torch.onnx.export(model, (example,), plain, dynamic_axes=axes, **ARGS)
    onnx_export._legacy_export(ctx, (example,), {}, tmp_path / "m.onnx", ["input"], ["logits"])
    assert (tmp_path / "m.onnx").read_bytes() == plain.getvalue()
    with torch.no_grad(), pytest.raises(Exception, match="_transformer_encoder_layer_fwd"):  # why grad mode stays on
        torch.onnx.export(model, (example,), io.BytesIO(), dynamic_axes=axes, **ARGS)


class _Kept(nn.Module):
    """Records a weak reference to an activation that autograd saves for backward (relu's input's product)."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(8, 64), nn.Linear(64, 2)
        self.seen: list[weakref.ref] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.a(x))  # saved by b (Linear saves its input for the weight's gradient)
        self.seen.append(weakref.ref(h))
        return self.b(h)


def test_no_activation_outlives_the_forward_while_the_exporter_holds_its_output(tmp_path: Path, monkeypatch) -> None:
    model, example = _Kept().eval(), torch.randn(4, 8)
    ctx = BuildContext(model=model, example=example, opset=17, onnx_exporter="torchscript", threads=1)
    alive: list[bool] = []

    def exporter(module, args, path, **kwargs):  # as the tracer does: the output, its grad_fn, held to the end
        assert torch.is_grad_enabled()
        out = module(*args)
        gc.collect()
        alive.append(module.seen[-1]() is not None)
        assert out.grad_fn is not None

    monkeypatch.setattr(torch.onnx, "export", exporter)
    onnx_export._legacy_export(ctx, (example,), {}, tmp_path / "m.onnx", ["input"], ["logits"])
    exporter(model, (example,), None)  # without the wrapper: autograd keeps it while the output lives
    assert alive == [False, True]
