"""The per-layer methods (exporter/diagnostics/layers/): one module each, named by the kind's row by a string (the
kinds never import the diagnostics) and resolved here by that name alone (issue 42, item 1)."""

from __future__ import annotations

import importlib
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from export_check.artifacts import KINDS, KINDS_BY_NAME
from export_check.diagnostics.layers import DIVERGENCE, INT8_LAYERS, compare_layers, method

FOLDER = Path(importlib.import_module("export_check.diagnostics.layers").__file__ or "").parent


def test_every_method_module_is_named_by_a_row_and_every_name_is_a_module_s_compare() -> None:
    named = {k.layers for k in KINDS if k.layers is not None}
    assert named == {p.stem for p in FOLDER.glob("*.py") if not p.stem.startswith("_")} == {"torchscript", "onnx", "program", "executorch"}
    for name in named:
        assert method(name) is importlib.import_module(f"export_check.diagnostics.layers.{name}").compare


@pytest.mark.parametrize("name", ["onnxruntime", "_common", "layers.onnx", "", "../onnx"])
def test_a_name_no_method_module_holds_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="no per-layer method named"):
        method(name)


def test_a_row_without_a_method_or_naming_a_missing_one_gets_a_table_that_says_why() -> None:
    batch = np.zeros((3, 2), dtype=np.float32)
    none = compare_layers(KINDS_BY_NAME["aoti"], Path("m.pt2"), None, batch, 1e-5, DIVERGENCE, threads=1, start=5)
    assert none.error == "ValueError: no per-layer method for aoti artifacts"
    assert (none.purpose, none.batch_start, none.batch_size, none.layers, none.first) == (DIVERGENCE, 5, 3, (), None)
    misnamed = compare_layers(replace(KINDS_BY_NAME["onnx"], layers="onxx"), Path("m.onnx"), None, batch, 1e-5, INT8_LAYERS, 1, 0)
    assert misnamed.error == "ValueError: no per-layer method named 'onxx'" and misnamed.purpose == INT8_LAYERS
