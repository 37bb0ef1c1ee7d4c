"""The gate families: a family of rows judged by one gate (float, int8, fp16, bf16, eager vs golden), its default gate
and the options that set it, which families' verdicts depend on the CPU, and the family a row's runtime decided.

>>> FAMILIES["int8"].default.describe(), CPU_DEPENDENT_FAMILIES
('relMAE<=5% & top1>=98%', ('int8', 'fp16', 'bf16'))
"""

from __future__ import annotations

from dataclasses import dataclass

from .gate import Gate
from .metrics import GATE_METRICS, default_text

FLOAT_MAX_MAE = 1e-5
# int8 is judged relative to the output's own size (MAE / mean |reference|), so the same quantization
# error gets the same verdict whatever the scale of the logits. Measured on the bundled ResNet: torch
# dynamic int8 0.5%, onnxruntime dynamic int8 3.4% on an AVX2 CPU without VNNI (0.058 / 1.72), top-1
# unchanged. The absolute MAE stays shown against the float 1e-5.
INT8_MAX_RELATIVE_MAE = 0.05
INT8_MIN_TOP1 = 0.98
# fp16 (an ONNX file in float16, OpenVINO's fp16-compressed weights) is judged like int8, relative to
# the output's size; measured on the bundled models it is 10-100x smaller than int8's error (README,
# "Artifact groups"), so its gate is tighter: 1% of the mean |reference|, top-1 agreement 99%.
FP16_MAX_RELATIVE_MAE = 0.01
FP16_MIN_TOP1 = 0.99
# bf16 (OpenVINO's default compute on a CPU with avx512_bf16 or AMX: the `openvino` row there) keeps 8
# mantissa bits against fp16's 11: measured on the four bundled digit models over the 360 held-out
# digits (benchmarks/openvino_precision.py), bf16 compute gives 0.30-0.68% relative MAE, fp16 weights
# at f32 compute (the same file on an AVX2 CPU) 0.02-0.07%, top-1 100% for both. The fp16 gate's 1%
# leaves bf16 a margin of 1.5x; bf16's is 2%, 3x the worst measured, and its agreement gate int8's 98%
# (bf16's resolution, 2^-8 of each value, is int8's 256 levels, and it flips near-ties as int8 does).
BF16_MAX_RELATIVE_MAE = 0.02
BF16_MIN_TOP1 = 0.98

# An int8 row whose file holds less than this share of the model's weight parameters (by count) in int8 says so in
# a note, and fails under --strict (judge.coverage_findings): dynamic int8 of a CNN quantizes its classifier only
# (0.8% of the bundled ResNet's weights), and a static recipe may leave a recurrent layer float (the recogniser's
# LSTM, 75% of its weights). Half: most of the weights, whatever the model; a row above it quantized what carries the model.
MIN_INT8_COVERAGE = 0.5


@dataclass(frozen=True)
class GateOption:
    """One user-settable field of a family's gate: the CLI flag and settings key ``name``."""

    name: str  # "max-mae": --max-mae on the command line, max-mae in [tool.export-check]
    field: str  # the Gate field it sets
    help: str
    metavar: str = "X"


@dataclass(frozen=True)
class GateFamily:
    """A family of rows judged by one gate. Adding a family (fp16, static int8) is one row of
    ``GATE_FAMILIES``: its default gate, the options that set it, and where its rows' gate comes
    from when no option does (``follows``: the eager row follows the float gate's MAE)."""

    name: str
    label: str  # how the Markdown summary names the family's rows: "float artifacts"
    short: str  # and the HTML report: "float"
    default: Gate
    options: tuple[GateOption, ...] = ()
    follows: str | None = None  # take these Gate fields' values from this family's options
    # Per-layer tables (exporter/diagnostics/divergence.py) for this family's rows: "on-fail" builds a
    # divergence table when a row fails; "quantization" builds the per-layer error table when it fails
    # or when --diagnose asks.
    layers: str = "on-fail"
    fix_hint: str = "max-mae"  # the settings key a failing row's message suggests loosening


def _options(prefix: str, what: str, default: Gate, relative: bool) -> tuple[GateOption, ...]:
    """A family's options, one per bound of every ``metrics.GATE_METRICS`` entry it offers (the float
    family: those of every family; int8, fp16, bf16 also the relative MAE and top-1), named ``PREFIX<stem>``."""
    return tuple(GateOption(f"{prefix}{b.option}", b.field, b.help.format(what=what, default=default_text(b, getattr(default, b.field))),
                            b.metavar)
                 for m in GATE_METRICS if relative or m.families == "all" for b in m.bounds)


def _relative_family(name: str, label: str, max_relative_mae: float, min_top1: float, what: str = "", layers: str = "on-fail",
                     fix_hint: str = "") -> GateFamily:
    """A family judged relative to the output's size (int8, fp16, bf16): options named ``NAME-...``."""
    default = Gate(max_relative_mae=max_relative_mae, min_top1=min_top1)
    return GateFamily(name, label, name, default, _options(f"{name}-", what or label, default, relative=True),
                      layers=layers, fix_hint=fix_hint or f"{name}-max-relative-mae / {name}-min-top1")


GATE_FAMILIES: tuple[GateFamily, ...] = (
    GateFamily("float", "float artifacts", "float", Gate(max_mae=FLOAT_MAX_MAE),
               _options("", "float artifacts and of eager vs golden", Gate(max_mae=FLOAT_MAX_MAE), relative=False)),
    _relative_family("int8", "int8 artifacts", INT8_MAX_RELATIVE_MAE, INT8_MIN_TOP1, layers="quantization"),
    _relative_family("fp16", "fp16 artifacts", FP16_MAX_RELATIVE_MAE, FP16_MIN_TOP1),
    # A row whose runtime computed in bf16 on this CPU (precision_family): OpenVINO's default on avx512_bf16/AMX.
    _relative_family("bf16", "bf16 rows", BF16_MAX_RELATIVE_MAE, BF16_MIN_TOP1,
                     what="rows computed in bf16 (OpenVINO on a CPU with avx512_bf16 or AMX)"),
    # Eager vs the approved reference logits: is this the approved model?
    GateFamily("eager", "eager vs golden", "eager vs golden", Gate(max_mae=FLOAT_MAX_MAE), follows="float", layers="none"),
)
FAMILIES: dict[str, GateFamily] = {f.name: f for f in GATE_FAMILIES}
# The families whose verdicts may change with the CPU that runs them (int8 dot products with or without
# VNNI, fp16 and bf16 paths): their rows carry the CPU flags and instruction-set caps that decided them.
CPU_DEPENDENT_FAMILIES = ("int8", "fp16", "bf16")


def precision_family(family: str, details: dict[str, str]) -> str:
    """The gate family of a row as its runtime decided it on this machine: a row whose runtime reports
    bf16 compute (``inference_precision``; OpenVINO's default on a CPU with avx512_bf16 or AMX) is judged
    as bf16, whatever its kind's table row says; any other keeps its kind's family.

    >>> precision_family("fp16", {"inference_precision": "bf16"}), precision_family("fp16", {"inference_precision": "f32"})
    ('bf16', 'fp16')
    """
    return "bf16" if details.get("inference_precision") == "bf16" else family


GATE_OPTIONS: tuple[GateOption, ...] = tuple(o for f in GATE_FAMILIES for o in f.options)
assert len({o.name for o in GATE_OPTIONS}) == len(GATE_OPTIONS), "gate option names must be unique"
