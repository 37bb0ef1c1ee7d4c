"""Run configuration: frozen, validated on construction, no heavy imports. The gates are the gates room's (``gates``).

>>> check_cache_gb(5, "cache-max-size"), JOBS
(5.0, (1, 2))
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import UsageError
from .gates import Thresholds
from .pinned import ORT_EXECUTION_MODE, ORT_GRAPH_OPTIMIZATION, ORT_INTER_OP_THREADS, ORT_LEVEL_NAMES, TORCH_INTEROP_THREADS
from .signature import SignatureSettings

ONNX_EXPORTERS = ("torchscript", "dynamo")
COLOR_CHOICES = ("auto", "always", "never")  # --color (report/text.py: use_colour); here, so the views need not import the options

# The diagnostics' plan (diagnostics/shapes.py plan_for), here so that the cache key (cache/key.py) holds it without
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
class RunConfig:
    """Everything one check needs. Paths are as given; the pipeline validates them before work starts."""

    checkpoint: Path
    arch: str
    golden: Path
    out_dir: Path
    arch_kwargs: dict[str, Any] = field(default_factory=dict)
    arch_root: Path | None = None  # where a module-form arch spec is imported from
    kinds: tuple[str, ...] = ()  # kind and group names (resolved to kinds on construction); empty: the default group
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
    # whether the golden set is a language model's (prompts: exporter/decode), read from it on construction
    language: bool = field(default=False, init=False, compare=False)
    # a language model's gate per decode family (decode/gates.py), ``decode_gates`` and the float MAE bound laid over the
    # defaults: every bound checked on construction, before any work
    generation_gates: dict[str, Any] = field(default_factory=dict, init=False, compare=False, repr=False)

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
        from .artifacts import KIND_NAMES, resolve_kinds, unknown_kinds_message
        from .decode import names as decode
        from .decode.goldenset import is_generative

        if len(set(self.kinds)) != len(self.kinds):
            raise UsageError(f"artifact kinds listed twice: {', '.join(self.kinds)}")
        language = is_generative(self.golden)  # a language model has kinds of its own (exporter/decode): read once, here
        object.__setattr__(self, "language", language)
        # group names as the kinds they stand for: an image model's groups (default, modern, edge, all), a language model's one
        object.__setattr__(self, "kinds", decode.resolve(self.kinds) if language else resolve_kinds(self.kinds))
        unknown = [k for k in self.kinds if k not in (decode.KIND_NAMES if language else KIND_NAMES)]
        if unknown:
            raise UsageError(decode.unknown_kinds_message(unknown) if language else unknown_kinds_message(unknown))
        if language:
            from .decode.gates import MAE_OPTION, gates_for

            given = dict(self.decode_gates, **{MAE_OPTION: self.thresholds.gate_for("float").max_mae})
            object.__setattr__(self, "generation_gates", gates_for(given))

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
        """The kinds this run checks, in the table's order: an image model's (the default group when none is chosen), or a
        language model's (every one of them when none is chosen)."""
        from .artifacts import DEFAULT_KINDS, KIND_NAMES
        from .decode.names import KIND_NAMES as LANGUAGE_KINDS

        names, default = (LANGUAGE_KINDS, LANGUAGE_KINDS) if self.language else (KIND_NAMES, DEFAULT_KINDS)
        chosen = set(self.kinds) if self.kinds else set(default)
        return tuple(k for k in names if k in chosen)

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
