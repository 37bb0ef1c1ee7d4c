"""A kind that does not apply to the model is a row of its own: shown, explained, not a failure (unless --strict)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from arches import AllConv
from conftest import TESTS, save_state, seeded
from export_check.cli import main

ARCH = f"{TESTS / 'arches.py'}:AllConv"


@pytest.fixture(scope="module")
def all_conv(tmp_path_factory: pytest.TempPathFactory, digit_images: Path) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("allconv")
    checkpoint = save_state(seeded(AllConv), folder / "allconv.pth")
    golden = folder / "golden"
    assert main(["golden", "record", str(checkpoint), "--arch", ARCH, "--inputs", str(digit_images), "--golden", str(golden),
                 "--size", "32"]) == 0
    return checkpoint, golden


def _check(all_conv: tuple[Path, Path], tmp_path: Path, *extra: str) -> tuple[int, dict]:
    checkpoint, golden = all_conv
    code = main(["check", str(checkpoint), "--arch", ARCH, "--golden", str(golden), "--out", str(tmp_path / "out"), "--no-cache", "-q",
                 "--artifacts", "onnx,torch-int8-dynamic", "--json", str(tmp_path / "r.json"), "--junit", str(tmp_path / "j.xml"), *extra])
    return code, json.loads((tmp_path / "r.json").read_text())


def test_dynamic_int8_on_a_model_without_linear_layers_is_not_applicable_and_the_run_passes(all_conv, tmp_path: Path, capsys) -> None:
    code, report = _check(all_conv, tmp_path)
    rows = {r["name"]: r for r in report["rows"]}
    assert code == 0 and report["passed"] and report["counts"]["not-applicable"] == 1
    assert rows["onnx"]["status"] == "pass"
    int8 = rows["torch-int8-dynamic"]
    assert int8["status"] == "not-applicable" and int8["metrics"] is None
    (reason,) = int8["reasons"]
    assert reason.startswith("not applicable: the model has none of the layers dynamic int8 quantization converts (torch's default "
                             "dynamic mapping: ") and reason.endswith("), so it would change nothing")
    # the types torch.ao's quantize_dynamic converts at int8 by default (its own qconfig_spec), named from torch's mapping
    for layer in ("nn.Linear", "nn.LSTM", "nn.GRU", "nn.LSTMCell", "nn.GRUCell", "nn.RNNCell"):
        assert layer in reason, layer
    assert "nn.Embedding" not in reason and "NonDynamicallyQuantizableLinear" not in reason
    assert not (tmp_path / "out" / "torch-int8-dynamic.pt").exists()
    out = capsys.readouterr().out
    assert "N/A torch-int8-dynamic: not applicable: the model has none of the layers dynamic int8 quantization converts" in out
    assert "PASSED: 2 passed, 0 failed, 0 errors, 1 not applicable" in out
    junit = (tmp_path / "j.xml").read_text()
    assert 'skipped="1"' in junit and "<skipped message=\"not applicable" in junit


def test_strict_makes_a_kind_that_does_not_apply_fail(all_conv, tmp_path: Path) -> None:
    code, report = _check(all_conv, tmp_path, "--strict")
    int8 = {r["name"]: r for r in report["rows"]}["torch-int8-dynamic"]
    assert code == 1 and int8["status"] == "fail" and int8["reasons"][0].endswith("(--strict: a kind that does not apply fails)")


def test_torchao_int8_on_a_model_without_linear_layers_is_not_applicable(tmp_path: Path) -> None:
    import torch

    from export_check.artifacts import KINDS_BY_NAME, BuildContext
    from export_check.artifacts.base import NotApplicable

    ctx = BuildContext(model=seeded(AllConv), example=torch.zeros(2, 3, 16, 16), opset=17, onnx_exporter="torchscript", threads=1)
    with pytest.raises(NotApplicable, match="^not applicable: the model has no nn.Linear layer, the layers torchao's int8 dynamic"):
        KINDS_BY_NAME["torchao-int8-dynamic"].build(ctx, tmp_path / "torchao-int8-dynamic.pt2", None)
    assert not list(tmp_path.iterdir())


def test_a_model_of_lstm_cells_gets_a_built_dynamic_int8_row(tmp_path: Path, digit_images: Path) -> None:
    """Issue 44: dynamic int8 converts nn.LSTMCell (torch's default dynamic mapping), so a model built on one gets a built
    torch-int8-dynamic row, not "not applicable"; its file really holds the quantized cell."""
    import torch
    from cell_arches import CellReader

    arch = f"{TESTS / 'cell_arches.py'}:CellReader"
    checkpoint = save_state(seeded(CellReader), tmp_path / "cells.pth")
    assert main(["golden", "record", str(checkpoint), "--arch", arch, "--inputs", str(digit_images), "--golden", str(tmp_path / "golden"),
                 "--size", "32", "-q"]) == 0
    code = main(["check", str(checkpoint), "--arch", arch, "--golden", str(tmp_path / "golden"), "--out", str(tmp_path / "out"),
                 "--no-cache", "-q", "--artifacts", "torch-int8-dynamic", "--json", str(tmp_path / "r.json")])
    row = {r["name"]: r for r in json.loads((tmp_path / "r.json").read_text())["rows"]}["torch-int8-dynamic"]
    assert code in (0, 1) and row["status"] in ("pass", "fail") and row["metrics"] is not None, row
    assert row["details"]["quantized_lstmcell_layers"] == "1" and row["details"]["quantized_linear_layers"] == "0"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit.load's own deprecation
        scripted = torch.jit.load(str(tmp_path / "out" / "torch-int8-dynamic.pt"))
    assert hasattr(scripted.cell, "_packed_weight_ih") and not hasattr(scripted.cell, "weight_ih")  # int8 packed, no float weight
