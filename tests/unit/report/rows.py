"""Rows and reports of real metrics (numpy arrays through compare) for the view tests of this folder."""

from __future__ import annotations

import numpy as np

from export_check.compare import compare
from export_check.files import FileInfo
from export_check.gates import Gate, Thresholds
from export_check.results import PASS, GoldenSummary, Report, Row

REFERENCE = np.linspace(-3.0, 3.0, 40).reshape(4, 10)
PAIR = (1e-3, 0.0)


def candidate(errors: dict[tuple[int, int], float]) -> np.ndarray:
    out = REFERENCE.copy()
    for at, delta in errors.items():
        out[at] += delta
    return out


def row(name: str = "onnx", family: str = "float", gate: Gate | None = None, errors: dict[tuple[int, int], float] | None = None,
        kind: str = "logits", **fields) -> Row:
    gate = gate or Gate(max_mae=1e-5)
    pairs = (gate.tolerance,) if gate.tolerance is not None else ()
    metrics = compare(REFERENCE, candidate(errors or {}), kind=kind, tolerances=pairs)
    return Row(name=name, family=family, compared_with="eager", status=fields.pop("status", PASS), gate=gate, metrics=metrics,
               reasons=fields.pop("reasons", ()), **fields)


def report(*rows: Row) -> Report:
    return Report(tool_version="0.1.0", created="2026-12-01T00:00:00+00:00", checkpoint=FileInfo("m.pth", 1, "f" * 64),
                  golden=GoldenSummary(path="/golden", inputs=4, manifest_sha256="e" * 64, created="", recorded_checkpoint_sha256=None,
                                       recorded_with=(), label_accuracy=None),
                  thresholds=Thresholds(), settings=(), versions=(), rows=tuple(rows), seconds=1.0, out_dir="/tmp/out")
