"""Run configuration and gates: frozen, validated on construction, no heavy imports.

>>> Gate(max_mae=1e-5).describe()
'MAE<=1e-05'
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .errors import UsageError
from .gates import BOUNDS, GATE_METRICS, Gate, default_text, top_k_of
from .pinned import ORT_EXECUTION_MODE, ORT_GRAPH_OPTIMIZATION, ORT_INTER_OP_THREADS, ORT_LEVEL_NAMES, TORCH_INTEROP_THREADS
from .signature import SignatureSettings

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

ONNX_EXPORTERS = ("torchscript", "dynamo")
COLOR_CHOICES = ("auto", "always", "never")  # --color (report/text.py: use_colour); here, so the views need not import the options

# The diagnostics' plan (diagnostics/run.py plan_for), here so that the cache key (cache/key.py) holds it without
# importing the diagnostics.
# Repeats of the timed batch for the latency median (after one warm-up run).
LATENCY_REPEATS = 5
# A model of at most this many parameters always runs the full plan of issue 12 (the bundled digit models hold
# 20,000-160,000, the catalogue's CleanLarge 3.4 million, MobileNetV2 3.5 million; each costs 0.05-0.4 s per row at
# the full plan on digits); a larger one gets the budget's share (ResNet-50: 25.6 million, 0.2-0.7 s per image).
# The plan is decided by the model and the set alone, never by a clock: the
# same check plans the same runs on any machine under any load (issue 44: under load the bundled ResNet measured
# 10.2 ms per image and lost its checks to a seconds-per-image rule), and the cache keys on that rule (cache/key.py).
SMALL_MODEL_PARAMETERS = 5_000_000
# A build still running after this long is killed and becomes its row's error, so a hung exporter
# cannot hang CI; generous, since a big model's onnxsim pass can take minutes.
BUILD_TIMEOUT = 1800.0
MAX_THREADS = 1024  # intra-op threads; torch and onnxruntime would try to start every one of them
JOBS = (1, 2)  # processes working at once: this one, and the build server (exporter/builder/isolation.py)


def default_cache_dir() -> Path:
    """Where the artifact cache lives by default: ``$XDG_CACHE_HOME/export-check``, else ``~/.cache/export-check``."""
    base = os.environ.get("XDG_CACHE_HOME", "").strip()
    root = Path(os.path.expanduser(base)) if base and Path(os.path.expanduser(base)).is_absolute() else Path.home() / ".cache"
    return root / "export-check"



def _positive_finite(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise UsageError(f"{name} must be a finite number >= 0, got {value!r}")


CACHE_MAX_GB = 1e9  # an exabyte: a bound no disk reaches, so that the size in bytes is always a 64-bit integer


def check_cache_gb(value: Any, where: str) -> float:
    """A cache size in GB (``cache-max-size``, ``cache prune --max-size``): finite, from 0 to ``CACHE_MAX_GB``.

    >>> check_cache_gb(1e308, "--max-size")
    Traceback (most recent call last):
    export_check.errors.UsageError: --max-size must be a number of GB from 0 to 1e+09, got 1e+308
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not 0 <= value <= CACHE_MAX_GB:
        shown = f"{value:g}" if isinstance(value, float) else repr(value)
        raise UsageError(f"{where} must be a number of GB from 0 to {CACHE_MAX_GB:g}, got {shown}")
    return float(value)


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
    """A family's options, one per bound of every ``gates.GATE_METRICS`` entry it offers (the float
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


@dataclass(frozen=True)
class Thresholds:
    """The gate of every family, in ``GATE_FAMILIES`` order. ``reference_mae`` is the float threshold
    every row is also shown against.

    >>> Thresholds.from_options({"int8-max-mae": 0.2}).gate_for("int8").describe()
    'MAE<=0.2 & relMAE<=5% & top1>=98%'
    """

    gates: tuple[tuple[str, Gate], ...] = tuple((f.name, f.default) for f in GATE_FAMILIES)
    # Per output (settings: gate keys in [tool.export-check.outputs.NAME]): option values keyed by
    # ``GateOption.name``, laid over each family's gate for that output only (``gate_for(family, output)``).
    outputs: tuple[tuple[str, tuple[tuple[str, float], ...]], ...] = ()

    @classmethod
    def from_options(cls, values: dict[str, Any], outputs: dict[str, dict[str, float]] | None = None) -> Thresholds:
        """Gates from option values keyed by ``GateOption.name`` (absent or None: the default), and the
        gate values set per output (``{"boxes": {"max-mae": 1e-4}}``).

        >>> t = Thresholds.from_options({}, {"boxes": {"int8-max-relative-mae": 0.1}})
        >>> t.gate_for("int8", "boxes").describe(), t.gate_for("int8", "scores").describe()
        ('relMAE<=10% & top1>=98%', 'relMAE<=5% & top1>=98%')
        """
        made = cls().overlaid(values)
        return replace(made, outputs=tuple((name, tuple(sorted(v.items()))) for name, v in sorted((outputs or {}).items()) if v))

    @staticmethod
    def _changes(family: GateFamily, values: dict[str, Any]) -> dict[str, Any]:
        source = FAMILIES[family.follows] if family.follows else family
        return {o.field: values[o.name] for o in source.options if values.get(o.name) is not None}

    def overlaid(self, values: dict[str, Any]) -> Thresholds:
        """These gates with the option values keyed by ``GateOption.name`` laid over them (absent or None: kept);
        ``export-check judge`` lays the options given now over a report's gates. A value set for one output
        (settings) stays that output's: it is the more specific."""
        gates = [(family.name, self.gate_for(family.name).replace(**self._changes(family, values))) for family in GATE_FAMILIES]
        return Thresholds(gates=tuple(gates), outputs=self.outputs)

    def output_values(self, output: str) -> dict[str, float]:
        """The gate values set for this one output (settings), keyed by option name; empty when none are."""
        return dict(dict(self.outputs).get(output, ()))

    @classmethod
    def from_json(cls, data: Any, where: str) -> Thresholds:
        """The thresholds a report or bundle recorded (``to_json``); one UsageError line naming ``where`` otherwise."""
        try:
            gates = tuple((f.name, Gate(**{k: v for k, v in data[f.name].items() if k in BOUNDS})) for f in GATE_FAMILIES)
            per_output = data.get("outputs") or {}
            known = {o.name for o in GATE_OPTIONS}
            if not isinstance(per_output, dict) or not all(isinstance(v, dict) and set(v) <= known for v in per_output.values()):
                raise TypeError("its per-output gates are not a table of gate options per output")
            outputs = tuple((str(name), tuple(sorted((k, float(x)) for k, x in v.items()))) for name, v in sorted(per_output.items()) if v)
        except (KeyError, TypeError, ValueError, AttributeError, UsageError) as exc:
            raise UsageError(f"{where}: its gates cannot be read ({exc}); write it again with this export-check") from None
        return cls(gates=gates, outputs=outputs)

    def loosen_keys(self, family: str) -> list[str]:
        """The settings keys of the bounds ``family``'s gate sets: what a failing row's message says to loosen after review."""
        found = FAMILIES.get(family)
        if found is None:
            return ["max-mae"]
        source = FAMILIES[found.follows] if found.follows else found
        bounds = set(self.gate_for(family).set_bounds())
        return [o.name for o in source.options if o.field in bounds] or [k.strip() for k in found.fix_hint.split("/")]

    def with_gates(self, **gates: Gate) -> Thresholds:
        """These thresholds with some families' gates replaced: ``with_gates(float=Gate(max_mae=1e-4))``."""
        unknown = set(gates) - set(FAMILIES)
        if unknown:
            raise UsageError(f"unknown gate family {', '.join(sorted(unknown))}; choose from {', '.join(FAMILIES)}")
        return Thresholds(gates=tuple((name, gates.get(name, gate)) for name, gate in self.gates), outputs=self.outputs)

    @property
    def reference_mae(self) -> float:
        gate = self.gate_for("float")
        return gate.max_mae if gate.max_mae is not None else gate.mae_bound(1.0)

    def gate_for(self, family: str, output: str | None = None) -> Gate:
        """``family``'s gate; for ``output``, with the values set for that output laid over it."""
        gate = dict(self.gates)[family]
        values = self.output_values(output) if output is not None and self.outputs else {}
        return gate.replace(**self._changes(FAMILIES[family], values)) if values else gate

    def all_gates(self) -> tuple[Gate, ...]:
        """Every gate some row or output may be judged by: each family's, and each family's for each output with values of its own."""
        return tuple(dict.fromkeys([g for _, g in self.gates] + [self.gate_for(f, o) for f, _ in self.gates for o, _ in self.outputs]))

    def tolerances(self) -> tuple[tuple[float, float], ...]:
        """Every ``(atol, rtol)`` pair some family's gate tests: what the replay counts per output
        (``compare.ErrorAccumulator``), so each row is judged by the pair of its own family.

        >>> Thresholds.from_options({"atol": 1e-4, "int8-rtol": 0.1}).tolerances()
        ((0.0001, 0.0), (0.0, 0.1))
        """
        pairs = (gate.tolerance for gate in self.all_gates())
        return tuple(dict.fromkeys(p for p in pairs if p is not None))

    def top_ks(self) -> tuple[int, ...]:
        """Every k some family's top-k agreement gate asks for: what the replay counts per logits output."""
        return tuple(dict.fromkeys(k for gate in self.all_gates() if (k := top_k_of(gate)) is not None))

    def described(self) -> tuple[tuple[GateFamily, str], ...]:
        """(family, its gate described) for every family, in table order: what the reports show."""
        return tuple((FAMILIES[name], gate.describe()) for name, gate in self.gates)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {name: gate.to_json() for name, gate in sorted(self.gates)}
        data["reference_mae"] = self.reference_mae
        if self.outputs:
            data["outputs"] = {name: dict(values) for name, values in self.outputs}
        return data


@dataclass(frozen=True)
class RunConfig:
    """Everything one check needs. Paths are as given; the pipeline validates them before work starts."""

    checkpoint: Path
    arch: str
    golden: Path
    out_dir: Path
    arch_kwargs: dict[str, Any] = field(default_factory=dict)
    arch_root: Path | None = None  # where a module-form arch spec is imported from
    kinds: tuple[str, ...] = ()  # empty: the default group (artifacts.GROUPS); options.to_run_config resolves group names
    thresholds: Thresholds = field(default_factory=Thresholds)
    decode_gates: tuple[tuple[str, float], ...] = ()  # a language model's gate options given (decode/gates.py OPTIONS): (name, value)
    batch_size: int = 16
    opset: int = 17
    onnx_exporter: str = "torchscript"
    threads: int = 1
    # onnxruntime graph optimisation level the onnx-fp16 row is loaded and run at (an fp16 graph that
    # crashes onnxruntime at "all" can load at "basic": measured on the ViT)
    fp16_optimization: str = ORT_GRAPH_OPTIMIZATION
    cache_dir: Path | None = None  # the artifact cache (exporter/cache/); None: no cache
    cache_max_size: float = 5.0  # GB (10^9 bytes) the cache is kept under, least recently used entries evicted; 0: no limit
    diagnose: bool = False  # also build the per-layer int8 tables of passing int8 rows (--diagnose)
    diagnostics_budget: float = 0.15  # share of a row's replay its batch-size/determinism/latency runs may cost (diagnostics/shapes.py)
    jobs: int | None = None  # 1: one artifact at a time; 2: replay each artifact while the next builds; None: by core count
    build_timeout: float = BUILD_TIMEOUT  # seconds one isolated build may run before it is killed; 0: no limit
    strict: bool = False  # a kind that does not apply to the model fails the run instead of being shown as not applicable
    # --judge-only: the cached observations of this check judged with today's gates; nothing built or replayed (no torch)
    judge_only: bool = False
    # [tool.export-check.model-inputs.*] and [tool.export-check.outputs.*]: what recording a format-2
    # golden set (the pytest plugin's record and regen) applies over what it discovers
    signature_settings: SignatureSettings = field(default_factory=SignatureSettings)
    # the settings files this run read (settings.find_settings; a fleet run's fleet file first): shown and
    # recorded in every report, never part of the cache key (the values they set are)
    settings_files: tuple[str, ...] = ()
    # the notes on settings files found beside the checkpoint and not read (settings.ignored_beside): the run's first notes
    settings_ignored: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.arch:
            raise UsageError(
                "no architecture given: pass --arch module:Factory or path/to/file.py:Class, "
                "or set arch in [tool.export-check] of pyproject.toml"
            )
        for name, value, low in (("batch size", self.batch_size, 1), ("threads", self.threads, 1), ("opset", self.opset, 7)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise UsageError(f"{name} must be an integer >= {low}, got {value!r}")
        if self.threads > MAX_THREADS:
            raise UsageError(f"threads must be at most {MAX_THREADS}, got {self.threads}; pass the number of cores to use")
        if self.jobs is not None and (isinstance(self.jobs, bool) or self.jobs not in JOBS):
            raise UsageError(f"jobs must be 1 (build every artifact, then replay) or 2 (replay each artifact while the next "
                             f"one builds), got {self.jobs!r}")
        _positive_finite("build timeout", self.build_timeout)
        _positive_finite("diagnostics budget", self.diagnostics_budget)
        check_cache_gb(self.cache_max_size, "cache-max-size")
        if self.fp16_optimization not in ORT_LEVEL_NAMES:
            raise UsageError(f"onnx-fp16 optimization must be one of {', '.join(ORT_LEVEL_NAMES)}, got {self.fp16_optimization!r}")
        if self.onnx_exporter not in ONNX_EXPORTERS:
            raise UsageError(f"onnx exporter must be one of {', '.join(ONNX_EXPORTERS)}, got {self.onnx_exporter!r}")
        if not isinstance(self.arch_kwargs, dict):
            raise UsageError(f"arch kwargs must be a JSON object, got {self.arch_kwargs!r}")
        from .artifacts import KIND_NAMES, unknown_kinds_message

        unknown = [k for k in self.kinds if k not in KIND_NAMES]  # groups are resolved by now (options.to_run_config)
        if unknown:
            raise UsageError(unknown_kinds_message(unknown))
        if len(set(self.kinds)) != len(self.kinds):
            raise UsageError(f"artifact kinds listed twice: {', '.join(self.kinds)}")

    @property
    def effective_jobs(self) -> int:
        """``jobs``, or 2 when this process may use two cores or more, else 1."""
        if self.jobs is not None:
            return self.jobs
        try:
            cores = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cores = os.cpu_count() or 1
        return 2 if cores >= 2 else 1

    @property
    def selected_kinds(self) -> tuple[str, ...]:
        from .artifacts import DEFAULT_KINDS, KIND_NAMES

        chosen = set(self.kinds) if self.kinds else set(DEFAULT_KINDS)
        return tuple(k for k in KIND_NAMES if k in chosen)

    def settings_json(self) -> dict[str, Any]:
        return {
            "arch": self.arch,
            "arch_kwargs": self.arch_kwargs,
            "batch_size": self.batch_size,
            "opset": self.opset,
            "onnx_exporter": self.onnx_exporter,
            "threads": self.threads,
            "kinds": list(self.selected_kinds),
            "inference": self.inference_settings(),
            "cache_dir": None if self.cache_dir is None else str(self.cache_dir),
            "diagnose": self.diagnose,
            "jobs": self.effective_jobs,
            "build_timeout": self.build_timeout,
            "strict": self.strict,
        }

    def export_settings(self) -> dict[str, Any]:
        """The settings an artifact file depends on (the cache keys on them)."""
        return {"batch_size": self.batch_size, "opset": self.opset, "onnx_exporter": self.onnx_exporter, "threads": self.threads}

    def inference_settings(self) -> dict[str, Any]:
        """Runtime settings that change speed and numbers, pinned by ``model.pinned_threads`` and
        ``artifacts._common.OnnxRunner``, recorded in the report and keyed on by the cache."""
        return {
            "torch_threads": self.threads,
            "diagnostics_budget": self.diagnostics_budget,  # what the diagnostics measure depends on it: the cache keys on it
            "torch_interop_threads": TORCH_INTEROP_THREADS,
            "onnxruntime": {
                "intra_op_num_threads": self.threads,
                "inter_op_num_threads": ORT_INTER_OP_THREADS,
                "execution_mode": ORT_EXECUTION_MODE,
                "graph_optimization_level": ORT_GRAPH_OPTIMIZATION,
                "providers": ["CPUExecutionProvider"],
            },
            "onnx_fp16_graph_optimization_level": self.fp16_optimization,
        }
