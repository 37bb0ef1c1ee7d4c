"""A new gate metric is one entry and one function in one module of the gates room (exporter/gates/metrics.py): added
to a copy of the package, it is a flag and a settings key of every family, a Gate keyword checked on construction, a
bound the reports describe and the JSON holds, and a reason the judge gives, with no other file touched (issue 42).
A metric whose value nothing measures yet brings its stream along, in the same entry: a replay measures it."""

from __future__ import annotations

import filecmp
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

PACKAGE = Path(__file__).resolve().parents[3] / "exporter"
TABLE = "GATE_METRICS: tuple[GateMetric, ...] = (\n"

# The one function: why a row fails the new bound (the value it reads, Metrics.median_abs, is measured already).
FUNCTION = '''def _median_reason(metrics: Metrics, value: float, bound: float) -> str:
    return f"median abs error {value:.3g} > {bound:g}"


'''
# The one entry.
ENTRY = '''    _scalar("median abs error", Bound("max_median_abs", "max median abs error", "max-median-abs",
                                      "median abs error gate of {what} (default: {default})"),
            "max", lambda m: m.median_abs, "median<={:g}", _median_reason),
'''

PROBE = '''
import numpy as np
import export_check
from export_check.cli import build_config, build_parser
from export_check.compare import compare
from export_check.errors import UsageError
from export_check.gates import Gate, Thresholds, gate_reasons
from export_check.options import SETTINGS

assert export_check.__file__.startswith(ROOT), export_check.__file__  # the copy, not the tree
args = build_parser().parse_args(["check", "model.pt", "--arch", "m:M", "--no-cache", "--max-median-abs", "0.25",
                                  "--int8-max-median-abs", "0.5"])
thresholds = build_config(args).thresholds
print(thresholds.gate_for("float").describe())
print(thresholds.gate_for("int8").describe())
print(thresholds.to_json()["float"]["max_median_abs"], "fp16-max-median-abs" in SETTINGS)
gate = thresholds.gate_for("float").replace(max_mae=10.0)
print(gate_reasons(compare(np.zeros((4, 3)), np.ones((4, 3))), gate))
try:
    Gate(max_mae=1.0, max_median_abs=-1)
except UsageError as exc:
    print(exc)
'''


def _differing(left: Path, right: Path, under: str = "") -> list[str]:
    """Every file that differs between two trees, or is in one only (``filecmp`` compares the bytes of those it stats alike)."""
    compared = filecmp.dircmp(left, right, ignore=["__pycache__"])
    found = [under + name for name in compared.diff_files + compared.left_only + compared.right_only + compared.funny_files]
    _, mismatch, errors = filecmp.cmpfiles(left, right, compared.common_files, shallow=False)
    found += [under + name for name in mismatch + errors if under + name not in found]
    return sorted(found + [f for sub in compared.common_dirs for f in _differing(left / sub, right / sub, f"{under}{sub}/")])


def _copy_with(tmp_path: Path, added_before_table: str, entry: str) -> Path:
    """The package copied under ``tmp_path``, with ``added_before_table`` and ``entry`` added to its metrics.py, and nothing else."""
    copy = tmp_path / "export_check"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    table = copy / "gates" / "metrics.py"
    text = table.read_text(encoding="utf-8")
    assert text.count(TABLE) == 1
    table.write_text(text.replace(TABLE, added_before_table + TABLE + entry), encoding="utf-8")
    assert _differing(PACKAGE, copy) == ["gates/metrics.py"]
    (tmp_path / "model.pt").write_bytes(b"PK")  # the flags are parsed and checked; nothing is loaded
    return copy


def _probe(tmp_path: Path, copy: Path, probe: str) -> list[str]:
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    result = subprocess.run([sys.executable, "-c", f"ROOT = {str(copy)!r}\n" + probe], capture_output=True, text=True, timeout=120,
                            cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_a_new_gate_metric_is_one_entry_and_one_function_in_the_metrics_module(tmp_path: Path) -> None:
    copy = _copy_with(tmp_path, FUNCTION, ENTRY)
    assert _probe(tmp_path, copy, PROBE) == [
        "median<=0.25 & MAE<=1e-05",
        "median<=0.5 & relMAE<=5% & top1>=98%",
        "0.25 True",
        "('median abs error 1 > 0.25',)",
        "max median abs error must be a finite number >= 0, got -1",
    ]


# A metric nothing measures yet: the largest error of any value relative to its reference's size. Its one class is its
# stream (what a replay measures, batch by batch: numpy imported inside it, as the gates import none) and its factory.
STREAM_CLASS = '''class _MaxRelativeError:
    """max over values of |candidate - reference| / max(|reference|, 1e-6); inf for a non-finite candidate value."""

    def __init__(self, layout: Layout) -> None:
        self._worst = 0.0

    def add(self, reference: Any, candidate: Any, finite: Any) -> None:
        import numpy as np

        error = np.where(finite, np.abs(candidate - reference), np.inf) / np.maximum(np.abs(reference), 1e-6)
        self._worst = max(self._worst, float(error.max(initial=0.0)))

    def value(self) -> float:
        return self._worst


'''
STREAM_ENTRY = '''    _streamed("max relative error", "max_relative_error", _MaxRelativeError,
              Bound("max_relative_error", "max relative error", "max-relative-error", "relative error gate of {what} (default: {default})"),
              "max", "maxrel<={:g}", lambda m, v, b: f"max relative error {v:.4g} > {b:g}", column="max rel"),
'''
# Measured by the code a replay measures with (run/observe.py Replay._accumulators, called on the outputs it compares),
# in batches, and judged by the judge's gate_reasons; what a cache entry of before the metric holds is measured again.
STREAM_PROBE = '''
import dataclasses, json, sys
from types import SimpleNamespace
import numpy as np
import export_check
from export_check.cli import build_config, build_parser
from export_check.gates import STREAMS, gate_reasons, metric_missing
from export_check.records import Observation
from export_check.run.observe import Replay

assert export_check.__file__.startswith(ROOT), export_check.__file__  # the copy, not the tree
reference, candidate = (np.asarray(a) for a in json.loads(sys.stdin.read()))
args = build_parser().parse_args(["check", "model.pt", "--arch", "m:M", "--no-cache", "--max-relative-error", "0.05",
                                  "--int8-max-relative-error", "0.5"])
config = build_config(args)
print(config.thresholds.gate_for("float").describe(), config.thresholds.gate_for("int8").describe(), "max_relative_error" in STREAMS)
compared = [SimpleNamespace(name="embedding", kind="values", class_axis=-1, ctc_blank=None)]
accumulator = Replay._accumulators(SimpleNamespace(config=config, compared=compared))["embedding"]
for start in range(0, len(reference), 3):
    accumulator.add(reference[start:start + 3], candidate[start:start + 3])
metrics = accumulator.result()
gate = config.thresholds.gate_for("float").replace(max_mae=10.0)
old = Observation(name="onnx", family="float", compared_with="eager", metrics=dataclasses.replace(metrics, streamed=()))
print(json.dumps({"value": metrics.stat("max_relative_error"), "json": metrics.to_json()["max_relative_error"],
                  "reasons": gate_reasons(metrics, gate), "passes": gate_reasons(metrics, gate.replace(max_relative_error=1e9)),
                  "measured again": metric_missing(old, config.thresholds)}))
'''


def test_a_new_gate_metric_that_needs_a_new_stream_is_one_entry_and_one_class_in_the_metrics_module(tmp_path: Path) -> None:
    copy = _copy_with(tmp_path, STREAM_CLASS, STREAM_ENTRY)
    rng = np.random.default_rng(7)
    reference = rng.normal(0, 1, (8, 5))
    candidate = reference + rng.normal(0, 0.01, reference.shape)
    candidate[5, 2] = reference[5, 2] * 1.5 + 0.2  # one value far off: the largest relative error, in the second batch
    expected = float(np.max(np.abs(candidate - reference) / np.maximum(np.abs(reference), 1e-6)))  # numpy on the whole arrays
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    result = subprocess.run([sys.executable, "-c", f"ROOT = {str(copy)!r}\n" + STREAM_PROBE], capture_output=True, text=True,
                            timeout=120, cwd=tmp_path, env=env, input=json.dumps([reference.tolist(), candidate.tolist()]))
    assert result.returncode == 0, result.stderr
    described, measured = result.stdout.splitlines()
    assert described == "maxrel<=0.05 & MAE<=1e-05 maxrel<=0.5 & relMAE<=5% & top1>=98% True"
    shown = json.loads(measured)
    assert expected > 0.05 and shown["value"] == shown["json"] and abs(shown["value"] - expected) <= 1e-12 * expected
    assert shown["reasons"] == [f"max relative error {expected:.4g} > 0.05"] and shown["passes"] == [] and shown["measured again"]


def test_no_stream_key_takes_the_name_of_a_measure_the_metrics_json_already_holds() -> None:
    """A stream's value is written into ``Metrics.to_json`` under its key, beside MAE and the rest: a key such as "mae"
    would overwrite one of them. Every gate stream, measured on an output where all apply (a CTC one), keeps its own."""
    import numpy as np

    from export_check.compare import ErrorAccumulator
    from export_check.gates import STREAMS

    reference = np.random.default_rng(0).normal(size=(4, 5, 3))
    accumulator = ErrorAccumulator("sequence-logits", -1, ctc_blank=0, streams=STREAMS)
    accumulator.add(reference, reference + 0.1)
    metrics = accumulator.result()
    plain = ErrorAccumulator("sequence-logits", -1, ctc_blank=0)
    plain.add(reference, reference + 0.1)
    own = set(plain.result().to_json())  # what the JSON holds with compare's own stream alone
    assert {"cosine", "snr_db", "cer"} <= set(STREAMS) and not set(STREAMS) & own, set(STREAMS) & own
    assert {key: metrics.to_json()[key] for key in STREAMS} == {key: metrics.stat(key) for key in STREAMS}
