"""Diagnostics that say *why* a row looks the way it does: batch-size agreement, run-to-run
determinism, cost, and where in the network an artifact departs from eager.

This module holds only the typed results (frozen dataclasses, no heavy imports). Measuring lives in
``shapes``, ``divergence`` and ``run`` (the rerun and the latency, from the replay's own outputs and
timings, compared and judged by ``determinism``); ``run`` is the one hook the pipeline calls.
Running and judging stay apart: measurements go into these records, and each module's pure
``judge`` turns a record into reasons.

Bounds, decided once here (and documented in docs/reports-and-diagnostics.md):

* batch-size agreement: at every batch size ``b`` (1, an odd size, the main size, the whole probe
  in one batch), the artifact's outputs for the probe images must pass the row's own gate against
  eager's outputs for the same images at the same batch size ``b`` (agreement counted only where at
  least ``MIN_AGREEMENT_IMAGES`` images ran). How far each one moves from its own output at the main
  size (and how far eager does) says why a size fails: specialised by the export, moving with the
  batch by design (dynamic int8 activation scales), or a model that itself depends on the batch.
* determinism: the same input run twice may differ by at most a tenth of the float MAE gate
  (``1e-6`` by default) in any value, for every kind. Measured: exactly 0 for all six kinds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

# Repeats of the timed batch for the latency median (after one warm-up run).
LATENCY_REPEATS = 5
# Top-1 agreement at a batch size is gated only when at least this many images ran at it (fewer: one
# flipped image would swing it by more than the int8 gates allow).
MIN_AGREEMENT_IMAGES = 32
# Determinism bound as a fraction of the float MAE gate.
RERUN_FRACTION_OF_FLOAT_GATE = 0.1


@dataclass(frozen=True)
class BatchSizeRun:
    """The artifact run over the probe images at one batch size, compared per image with eager's
    output for the same images at the same batch size (``mae``, ``agreement``: judged under the
    row's gate), and with its own output at the main batch size (``moved``: how much it changes with
    the batch; ``eager_moved``: how much eager does), which says why a size fails."""

    size: int
    images: int  # how many of the probe images were run at this size
    mae: float | None = None  # against eager at the same batch size, over those images; None when it failed
    max_abs: float | None = None
    agreement: float | None = None  # top-1 (or per-position) agreement with eager at this size; None: values, not logits
    reference_mean_abs: float | None = None  # mean |eager output| at this size, for relative gates
    nonfinite: int = 0
    worst_image: int | None = None  # index (into the golden set) of the image furthest from eager at this size
    worst_image_mae: float | None = None
    moved: float | None = None  # worst per-image MAE of the artifact here against its own output at the main size
    eager_moved: float | None = None  # the same for the eager model
    error: str | None = None  # the run failed (exception, or wrong number of output rows)
    eager_error: str | None = None  # the eager model itself fails at this size
    seconds: float = 0.0  # wall time the artifact's runs at this size took here (0: reused from the replay)

    @property
    def max_image_mae(self) -> float | None:
        """The worst image's MAE against eager at this batch size."""
        return self.worst_image_mae

    def to_json(self) -> dict[str, Any]:
        return {
            "size": self.size,
            "images": self.images,
            "mae": self.mae,
            "max_abs": self.max_abs,
            "agreement": self.agreement,
            "reference_mean_abs": self.reference_mean_abs,
            "nonfinite": self.nonfinite,
            "worst_image": self.worst_image,
            "worst_image_mae": self.worst_image_mae,
            "moved": self.moved,
            "eager_moved": self.eager_moved,
            "error": self.error,
            "eager_error": self.eager_error,
            "seconds": self.seconds,
        }


@dataclass(frozen=True)
class ShapeCheck:
    """Dynamic-shape validation: per-image agreement across batch sizes."""

    main_size: int
    bound: float  # how far an image may move with the batch size before it counts as moving (the row's MAE bound)
    runs: tuple[BatchSizeRun, ...]
    reasons: tuple[str, ...]  # from shapes.judge; empty when it passed

    @property
    def passed(self) -> bool:
        return not self.reasons

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(r.size for r in self.runs)

    def to_json(self) -> dict[str, Any]:
        return {
            "main_size": self.main_size,
            "bound": self.bound,
            "passed": self.passed,
            "runs": [r.to_json() for r in self.runs],
            "reasons": list(self.reasons),
        }


@dataclass(frozen=True)
class Rerun:
    """Determinism: the same batch run ``runs`` times; the largest difference from the first run."""

    runs: int
    images: int
    max_abs: float
    bound: float
    reasons: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return not self.reasons

    def to_json(self) -> dict[str, Any]:
        return {"runs": self.runs, "images": self.images, "max_abs": self.max_abs, "bound": self.bound,
                "passed": self.passed, "reasons": list(self.reasons)}


@dataclass(frozen=True)
class Latency:
    """Median wall time per image of one batch, at the run's fixed thread count. Never gates."""

    ms_per_image: float
    batch: int
    repeats: int
    threads: int
    samples_ms: tuple[float, ...]  # per-image milliseconds of every timed repeat
    seconds: float = 0.0  # wall time of the runs made for this record and the determinism rerun (0: all from the replay)

    def to_json(self) -> dict[str, Any]:
        return {"ms_per_image": self.ms_per_image, "batch": self.batch, "repeats": self.repeats,
                "threads": self.threads, "samples_ms": list(self.samples_ms), "seconds": self.seconds}


@dataclass(frozen=True)
class LayerDelta:
    """One module's output in the artifact against the same module's output in eager."""

    module: str  # qualified module name, "" for the model's own forward
    ops: str  # what ran it in the artifact: ONNX op types, or the TorchScript module's class
    mae: float
    max_abs: float
    sqnr_db: float  # 10*log10(signal power / error power); inf when identical
    departs: bool  # beyond the comparison threshold
    merged: tuple[str, ...] = ()  # modules with no nodes of their own whose output this value also is
    # What departs: "module" (its own computation), "forward-code" (the code of its forward between
    # its children: .item(), numpy, arithmetic on their outputs), "dropped" (a module with no nodes in
    # the artifact's graph, whose effect the graph lost: an in-place op on a view, for one)
    where: str = "module"

    @property
    def label(self) -> str:
        return self.module or "<model forward>"

    @property
    def described(self) -> str:
        if self.where == "forward-code":
            return f"the forward code of {self.label} itself ({self.ops}, between its children, which agree)"
        if self.where == "dropped":
            return f"{self.label}, which has no nodes in this graph: the export lost what it does (an in-place op on a view?)"
        return self.label

    def to_json(self) -> dict[str, Any]:
        return {"module": self.module, "ops": self.ops, "mae": self.mae, "max_abs": self.max_abs,
                "sqnr_db": None if not math.isfinite(self.sqnr_db) else self.sqnr_db,
                "departs": self.departs, "merged": list(self.merged), "where": self.where}


@dataclass(frozen=True)
class LayerComparison:
    """Per-module comparison with eager: where a float artifact diverges, or int8's per-layer error.

    ``scope`` is ``"local"`` when every module was fed eager's own inputs (TorchScript: the error is
    that module's alone), ``"cumulative"`` when the artifact ran end to end and its intermediate
    values were read out (ONNX: the error includes everything upstream).
    """

    purpose: str  # "divergence" (a failing float row) or "int8-layers"
    method: str
    scope: str  # "local" or "cumulative"
    batch_start: int  # golden index of the first image of the batch used
    batch_size: int
    threshold: float  # a module departs when MAE > threshold * max(1, mean |eager output|)
    layers: tuple[LayerDelta, ...]  # execution order (completion order of the modules)
    first: LayerDelta | None  # first module in execution order that departs
    error: str | None = None  # the diagnosis itself could not run
    # Modules with no nodes of their own in the artifact's graph that ran between the last agreeing
    # value and the first departing one: an optimizer may have folded a wrong operator into neighbours.
    suspects: tuple[str, ...] = ()
    seconds: float = 0.0  # wall time the comparison took

    @property
    def summary(self) -> str:
        if self.error:
            return f"diagnosis failed: {self.error}"
        if self.purpose == "int8-layers":
            worst = self.worst()
            if not worst:
                return "no quantized layer changed its output"
            how = "lowest SQNR" if self.scope == "local" else "largest added noise"
            return f"worst layers ({how}): " + ", ".join(f"{d.label} {d.sqnr_db:.1f} dB" for d in worst)
        if self.first is None:
            return (f"no module departs from eager beyond {self.threshold:g} at batch {self.batch_start}.."
                    f"{self.batch_start + self.batch_size - 1} ({len(self.layers)} modules compared)")
        if self.first.where != "module":
            return (f"first departs in {self.first.described}: MAE {self.first.mae:.3g}, "
                    f"SQNR {self.first.sqnr_db:.1f} dB ({self.scope} comparison)")
        text = (f"first departs at {self.first.label}: MAE {self.first.mae:.3g}, "
                f"SQNR {self.first.sqnr_db:.1f} dB ({self.scope} comparison, {self.first.ops})")
        if self.suspects:
            text += (f"; also suspect, having no nodes of their own in this graph (folded into neighbours): "
                     f"{', '.join(self.suspects)}")
        return text

    def worst(self, count: int = 3) -> tuple[LayerDelta, ...]:
        """The layers that hurt most. Local tables: lowest SQNR. Cumulative tables: the largest
        increase of the noise-to-signal ratio over the previous module in execution order."""
        changed = [d for d in self.layers if d.mae > 0]
        if self.scope == "local":
            return tuple(sorted(changed, key=lambda d: d.sqnr_db)[:count])
        added = []
        previous = 0.0
        for d in self.layers:
            nsr = 10 ** (-d.sqnr_db / 10) if math.isfinite(d.sqnr_db) else 0.0
            if d.mae > 0:
                added.append((nsr - previous, d))
            previous = nsr
        return tuple(d for _, d in sorted(added, key=lambda t: -t[0])[:count])

    def to_json(self) -> dict[str, Any]:
        return {
            "purpose": self.purpose,
            "method": self.method,
            "scope": self.scope,
            "batch_start": self.batch_start,
            "batch_size": self.batch_size,
            "threshold": self.threshold,
            "first": None if self.first is None else self.first.module,
            "suspects": list(self.suspects),
            "summary": self.summary,
            "worst": [d.module for d in self.worst()] if self.purpose == "int8-layers" else [],
            "layers": [d.to_json() for d in self.layers],
            "error": self.error,
            "seconds": self.seconds,
        }


@dataclass(frozen=True)
class Diagnostics:
    """Everything measured about one row beyond its drift. ``reasons`` are the gating findings."""

    shapes: ShapeCheck | None = None
    rerun: Rerun | None = None
    latency: Latency | None = None
    layers: LayerComparison | None = None
    notes: tuple[str, ...] = ()  # informational findings (never gating)
    seconds: float = 0.0  # wall time the diagnostics of this row took
    eager_check: EagerSelfCheck | None = None  # the eager row's: does it reproduce itself

    @property
    def reasons(self) -> tuple[str, ...]:
        out: tuple[str, ...] = ()
        if self.shapes is not None:
            out += self.shapes.reasons
        if self.rerun is not None:
            out += self.rerun.reasons
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "shapes": None if self.shapes is None else self.shapes.to_json(),
            "determinism": None if self.rerun is None else self.rerun.to_json(),
            "latency": None if self.latency is None else self.latency.to_json(),
            "layers": None if self.layers is None else self.layers.to_json(),
            "notes": list(self.notes),
            "seconds": self.seconds,
            "eager_self_check": None if self.eager_check is None else self.eager_check.to_json(),
        }


@dataclass(frozen=True)
class EagerSelfCheck:
    """The eager model run on the same batch twice before anything is built: does it reproduce
    itself, and if not, why (``random``: forward draws from torch's random number generator, e.g.
    dropout left on or ``randn_like``; ``state_changes``: attributes or buffers forward changed)."""

    runs: int
    images: int
    max_abs: float  # largest difference between two calls on the same batch
    mae: float  # their mean absolute difference: the eager model's own noise floor
    agreement: float | None  # top-1 agreement between the two calls (logits), None otherwise
    random: bool  # forward consumed torch's random number generator
    state_changes: tuple[str, ...] = ()  # "calls: 1 -> 2", "running_mean changed", ...
    reproduces_under_seed: bool | None = None  # the same seed before each call gives the same output
    reference_mean_abs: float = 0.0  # mean |output| of the first call: the scale of the noise

    def to_json(self) -> dict[str, Any]:
        return {"runs": self.runs, "images": self.images, "max_abs": self.max_abs, "mae": self.mae, "agreement": self.agreement,
                "reference_mean_abs": self.reference_mean_abs,
                "random": self.random, "state_changes": list(self.state_changes), "reproduces_under_seed": self.reproduces_under_seed}
