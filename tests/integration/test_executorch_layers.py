"""The per-layer table of a failing executorch row, made with ExecuTorch's own developer tools
(diagnostics.etdump: a rebuild's ETRecord, the file run with ETDump, the Inspector's pairing of values
with ops), on the bundled ResNet and golden set.

The fault: the bundled ResNet (its checkpoint, its golden set) with ``layers.1.relu1`` a ReLU that
scales by 1.01 while ``torch.export`` traces it (``torch.compiler.is_exporting()``): eager, the golden
set and every eager hook see the plain ReLU; the ``.pte`` computes 1.01x there, a wrong op that only
the export has. XNNPACK runs nearly every op of the file in one opaque call, so the row says so, and
its table is the same exported program on the portable kernels, where the fault is named; the numbers
are checked against eager's own module outputs (forward hooks) and the file run by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from arches import TinyNet
from conftest import DEFAULT_CHECKPOINT, DEFAULT_GOLDEN, REPO, seeded
from export_check.artifacts import KINDS_BY_NAME, BuildContext
from export_check.artifacts._common import captured_warnings
from export_check.config import RunConfig
from export_check.diagnostics.etdump import require_same_plan
from export_check.errors import ArtifactError
from export_check.golden.manifest import load_golden
from export_check.model import load_model
from export_check.records import LayerComparison, LayerDelta
from export_check.run.pipeline import run_check
from export_check.sentences import layers_summary

pytest.importorskip("executorch.devtools")

KIND = "executorch"
QUIRK = "layers.1.relu1"
SCALE = 1.01

ARCH_SOURCE = f'''
import importlib.util

import torch
from torch import nn

_spec = importlib.util.spec_from_file_location("_bundled_resnet_for_quirk", {str(REPO / "models" / "resnet.py")!r})
_bundled = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_bundled)


class ReLUScaledWhenExported(nn.ReLU):
    """A ReLU in eager; x{SCALE} while torch.export traces it: a wrong op only the exported program has."""

    def forward(self, x):
        y = super().forward(x)
        return y * {SCALE} if torch.compiler.is_exporting() else y


class ExportQuirkResNet(_bundled.ResNet):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.layers[1].relu1 = ReLUScaledWhenExported()  # no parameters: the bundled checkpoint loads as it is
'''


@pytest.fixture(scope="module")
def quirk(tmp_path_factory: pytest.TempPathFactory):
    """One check of the executorch kind on the quirky ResNet: (report, out dir, arch)."""
    root = tmp_path_factory.mktemp("executorch-layers")
    arch_file = root / "quirk_arch.py"
    arch_file.write_text(ARCH_SOURCE)
    arch = f"{arch_file}:ExportQuirkResNet"
    report = run_check(RunConfig(checkpoint=DEFAULT_CHECKPOINT, arch=arch, golden=DEFAULT_GOLDEN, out_dir=root / "out", kinds=(KIND,)))
    return report, root / "out", arch


def _batch(layers: LayerComparison) -> np.ndarray:
    golden = load_golden(DEFAULT_GOLDEN)
    items = golden.inputs[layers.batch_start : layers.batch_start + layers.batch_size]
    return np.stack([golden.load_input(item) for item in items]).astype(np.float32)


def _eager_outputs(arch: str, batch: np.ndarray, names: tuple[str, ...]) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Eager's own outputs of the modules ``names`` (forward hooks) and its logits, outside the tool."""
    model = load_model(DEFAULT_CHECKPOINT, arch, {}, None)
    seen: dict[str, np.ndarray] = {}
    modules = dict(model.named_modules())
    handles = [modules[n].register_forward_hook(lambda m, a, out, n=n: seen.__setitem__(n, out.detach().numpy().copy())) for n in names]
    try:
        with torch.inference_mode():
            logits = model(torch.from_numpy(batch)).numpy()
    finally:
        for handle in handles:
            handle.remove()
    return seen, logits


def test_the_failing_rows_table_names_the_op_the_export_changed_with_eagers_numbers(quirk) -> None:
    report, out, arch = quirk
    row = report.row(KIND)
    assert row.status == "fail" and row.metrics is not None and row.metrics.mae > 1e-3, (row.status, row.reasons)
    layers = row.diagnostics.layers
    assert layers is not None and layers.error is None, layers
    assert layers.purpose == "divergence" and layers.scope == "cumulative" and layers.method == "executorch-portable"
    assert layers.first is not None and layers.first.module == QUIRK, layers_summary(layers)
    before = layers.layers[: layers.layers.index(layers.first)]
    assert len(before) >= 12 and not any(d.departs for d in before), [(d.module, d.mae) for d in before]
    # a 1% scale: noise is 0.01 of the signal, SQNR 20*log10(100) = 40 dB, on any CPU
    assert math.isclose(layers.first.sqnr_db, 40.0, abs_tol=0.05), layers.first
    # the numbers, independently: eager's own outputs by forward hooks on the very images the table ran on
    batch = _batch(layers)
    assert 1 <= len(batch) <= 16
    eager, logits = _eager_outputs(arch, batch, (QUIRK, "layers.0.conv1"))
    relu = eager[QUIRK].astype(np.float64)
    assert layers.first.mae == pytest.approx((SCALE - 1) * np.abs(relu).mean(), rel=1e-3)
    assert layers.first.max_abs == pytest.approx((SCALE - 1) * np.abs(relu).max(), rel=1e-3)
    conv = next(d for d in layers.layers if d.module == "layers.0.conv1")
    assert conv.mae < 1e-5 * max(1.0, float(np.abs(eager["layers.0.conv1"]).mean())) and not conv.departs
    # the file's own values (its ETDump): the output of the delegate call that ends in fc is the file's
    # logits, which the runtime gives by hand
    own = {d.module: d for d in layers.artifact_layers}
    assert set(own) == {"pool", "fc", ""}, list(own)
    assert all(d.ops.startswith("delegate call (") for d in own.values())
    from executorch.runtime import Runtime

    ran = Runtime.get().load_program(out / "executorch.pte").load_method("forward").execute([torch.from_numpy(batch)])[0].numpy()
    diff = ran.astype(np.float64) - logits.astype(np.float64)
    assert own["fc"].mae == pytest.approx(np.abs(diff).mean(), rel=1e-4)
    assert own["fc"].sqnr_db == pytest.approx(10 * math.log10(np.sum(logits.astype(np.float64) ** 2) / np.sum(diff**2)), abs=0.01)
    assert own["pool"].departs and own["pool"].label == layers.artifact_first.label


def test_the_row_says_the_xnnpack_delegate_hides_the_layers(quirk) -> None:
    report, out, _ = quirk
    row = report.row(KIND)
    layers = row.diagnostics.layers
    from executorch.exir._serialize._program import deserialize_pte_binary

    pte = deserialize_pte_binary((out / "executorch.pte").read_bytes())
    delegates = [d.id for plan in getattr(pte, "program", pte).execution_plan for d in plan.delegates]
    assert delegates == ["XnnpackBackend", "XnnpackBackend"]  # what the file holds, read without the tool
    assert layers.delegate == "XnnpackBackend" and layers.delegate_calls == len(delegates)
    assert layers.graph_ops >= 30 and layers.graph_ops - 3 <= layers.delegated_ops < layers.graph_ops, (layers.delegated_ops, layers.graph_ops)
    where = next(r for r in row.reasons if r.startswith("where: "))
    assert where.startswith(f"where: first departs at {QUIRK}: MAE "), where
    assert (f"the XnnpackBackend delegate runs {layers.delegated_ops} of the {layers.graph_ops} ops of this .pte as 2 opaque calls, "
            "and its ETDump holds only each call's output (the .pte itself first departs at pool") in where
    assert where.endswith("the table is the same exported program without the delegate, on the portable kernels"), where
    as_json = layers.to_json()
    assert as_json["method"] == "executorch-portable" and as_json["delegated_ops"] == layers.delegated_ops
    assert [d["module"] for d in as_json["artifact_layers"]] == ["pool", "fc", ""]


def test_the_rebuilds_etrecord_must_describe_the_file(quirk, tmp_path) -> None:
    """The table names the file's values by a rebuild's ETRecord only when the rebuild has the file's
    execution plan; other constant data (a file changed after its build) is told apart from another program."""
    _, out, _ = quirk
    original = (out / "executorch.pte").read_bytes()
    assert require_same_plan(out / "executorch.pte", original) is True
    damaged = bytearray(original)
    damaged[-64] ^= 0xFF  # in the segments after the program's flatbuffer: the instructions stay as they are
    changed = tmp_path / "executorch.pte"
    changed.write_bytes(bytes(damaged))
    assert require_same_plan(changed, original) is False
    ctx = BuildContext(model=seeded(TinyNet), example=torch.zeros(2, 3, 16, 16), opset=17, onnx_exporter="torchscript", threads=1)
    other = tmp_path / "tiny.pte"
    with captured_warnings([]):  # as the pipeline does: the lowering's deprecation notices are not failures here
        KINDS_BY_NAME[KIND].build(ctx, other, None)
    with pytest.raises(ArtifactError, match=r"^tiny.pte is not the program a rebuild of the same model makes \(its instructions differ\)"):
        require_same_plan(other, original)


def _delta(module: str, mae: float, departs: bool) -> LayerDelta:
    return LayerDelta(module=module, ops="delegate call (30 ops)", mae=mae, max_abs=mae, sqnr_db=40.0, departs=departs)


def test_a_departure_only_inside_the_delegate_call_is_said_so() -> None:
    """The portable program agrees with eager and the file does not: the difference is in the delegate."""
    own = (_delta("pool", 0.02, True), _delta("fc", 0.05, True))
    agreeing = LayerComparison(purpose="divergence", method="executorch-portable", scope="cumulative", batch_start=0, batch_size=4,
                               threshold=1e-5, layers=(_delta("layers.0.conv1", 0.0, False),), first=None, delegate="XnnpackBackend",
                               delegated_ops=49, graph_ops=50, delegate_calls=2, artifact_layers=own)
    text = layers_summary(agreeing)
    assert text.startswith("no module departs from eager beyond 1e-05 at batch 0..3 (1 modules compared); the XnnpackBackend delegate "
                           "runs 49 of the 50 ops of this .pte as 2 opaque calls"), text
    assert "the .pte itself first departs at pool (MAE 0.02, delegate call (30 ops)), while the same program without the delegate " \
           "agrees: the difference is inside the delegate call" in text
    # without a portable table (it could not run), the file's own table says what it cannot see
    own_only = LayerComparison(purpose="divergence", method="executorch", scope="cumulative", batch_start=0, batch_size=4, threshold=1e-5,
                               layers=own, first=own[0], delegate="XnnpackBackend", delegated_ops=49, graph_ops=50, delegate_calls=2)
    assert layers_summary(own_only).endswith("and its ETDump holds only each call's output: the table has no values inside them")
    # nothing delegated: nothing said
    plain = LayerComparison(purpose="divergence", method="executorch", scope="cumulative", batch_start=0, batch_size=4, threshold=1e-5,
                            layers=own, first=own[0])
    assert "delegate" not in layers_summary(plain).replace("delegate call", "")
