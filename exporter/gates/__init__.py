"""The gates room: every fact of a gate, and the judging of numbers against one.

* ``metrics``: the table of gate metrics, ``GATE_METRICS``, one entry per metric with its function (its keyword(s) and
  options, how a gate shows it, the value it reads, why a row fails it, its noise rule, the stream that measures a value
  of its own): a new gate metric is one entry and one function (or stream class) there, and nothing else
  (tests/unit/gates/test_metrics.py adds two to a copy of the package); ``STREAMS``, every stream the gates read, is
  what a replay measures (``Thresholds.accumulator``);
* ``gate``: the typed, frozen :class:`Gate`, a bound on each metric it sets;
* ``families``: the gate families (float, int8, fp16, bf16, eager vs golden), their defaults and options, which are
  CPU-dependent, and the family a row's runtime decided (``precision_family``);
* ``thresholds``: the run's :class:`Thresholds`, per family and per output, from options, settings or JSON;
* ``judging``: a metrics record against one gate: its reasons, the values it lacks, the gate widened by eager's
  noise, the gate at a batch size, the rerun bound. The judge (run/judge.py) makes statuses and causes of them;
* ``agreement``: agreements counted in samples, in words.

Nothing here imports numpy or torch at import time.

>>> Thresholds().gate_for("int8").describe(), precision_family("fp16", {"inference_precision": "bf16"})
('relMAE<=5% & top1>=98%', 'bf16')
"""

from .agreement import PER_SAMPLE, agreement_name, changed_name, flips_text, per_sample_agreement, samples_for_one_flip, tolerated_flips
from .families import (
    BF16_MAX_RELATIVE_MAE,
    BF16_MIN_TOP1,
    CPU_DEPENDENT_FAMILIES,
    FAMILIES,
    FLOAT_MAX_MAE,
    FP16_MAX_RELATIVE_MAE,
    FP16_MIN_TOP1,
    GATE_FAMILIES,
    GATE_OPTIONS,
    INT8_MAX_RELATIVE_MAE,
    INT8_MIN_TOP1,
    MIN_INT8_COVERAGE,
    GateFamily,
    GateOption,
    precision_family,
)
from .gate import Gate
from .judging import (
    MIN_AGREEMENT_IMAGES,
    RERUN_FRACTION_OF_FLOAT_GATE,
    GateOf,
    at_batch_sizes,
    gate_of,
    gate_reasons,
    measured_reasons,
    metric_missing,
    missing,
    missing_names,
    reasons,
    reference_mae,
    rerun_bound,
    size_gate,
    size_gate_reasons,
    sole_output,
    with_noise,
)
from .metrics import BOUNDS, DEFAULT_TOP_K, GATE_METRICS, STREAMS, Bound, GateMetric, default_text, streams_of, top_k_of
from .thresholds import Thresholds, small_set_notes

__all__ = [
    "BF16_MAX_RELATIVE_MAE", "BF16_MIN_TOP1", "BOUNDS", "CPU_DEPENDENT_FAMILIES", "DEFAULT_TOP_K", "FAMILIES", "FLOAT_MAX_MAE",
    "FP16_MAX_RELATIVE_MAE", "FP16_MIN_TOP1", "GATE_FAMILIES", "GATE_METRICS", "GATE_OPTIONS", "INT8_MAX_RELATIVE_MAE", "INT8_MIN_TOP1",
    "MIN_AGREEMENT_IMAGES", "MIN_INT8_COVERAGE", "PER_SAMPLE", "RERUN_FRACTION_OF_FLOAT_GATE", "STREAMS", "Bound", "Gate", "GateFamily",
    "GateMetric", "GateOf", "GateOption", "Thresholds", "agreement_name", "at_batch_sizes", "changed_name", "default_text", "flips_text",
    "gate_of", "gate_reasons", "measured_reasons", "metric_missing", "missing", "missing_names", "per_sample_agreement",
    "precision_family", "reasons", "reference_mae", "rerun_bound", "samples_for_one_flip", "size_gate", "size_gate_reasons",
    "small_set_notes", "sole_output", "streams_of", "tolerated_flips", "top_k_of", "with_noise",
]
