"""Explain: after the judge, what only some rows need, measured for those rows alone.

The judge looks at a row as observed (``judge.wanted``) and says whether it deserves a per-layer
table: a failing float row (where does it first depart from eager?) or a quantized one (which layers
lose most?). For those, this measures the table (0.05-0.3 s per artifact, ``diagnostics.layers``, by
the method the kind's row names) on the batch that shows the failure: the worst image's, or, when the
replay agrees and one batch size does not, the batch at that size holding its worst image. The pipeline then
judges every row once more, on the enriched observations. Nothing here decides a verdict.

A failing row whose file is an ONNX graph (``judge.wanted`` too) also gets its smallest failing
subgraph, written beside the artifacts to hand over (``diagnostics.reduce``), on its worst samples.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ..artifacts import KINDS_BY_NAME, BuildContext
from ..artifacts._common import captured_warnings, dedupe
from ..compare import ErrorAccumulator, Metrics, to_samples_first
from ..config import RunConfig
from ..diagnostics import shapes
from ..diagnostics.layers import DIVERGENCE, INT8_LAYERS, compare_layers
from ..feeds import Feeds, length
from ..gates import FAMILIES, STREAMS, gate_reasons, size_gate_reasons, streams_of, top_k_of
from ..golden.goldenset import GoldenSet, stack_batches
from ..records import LayerComparison, Measured, Observation, Reduced
from .judge import passes_on_values, wanted


def _batch_at(golden: GoldenSet, batch_size: int, start: int) -> np.ndarray:
    """The one input of the batch the replay ran at ``start`` (per-layer tables take one input)."""
    for first, feeds in golden.feed_batches(batch_size):
        if first <= start < first + length(feeds, golden.signature):
            return next(iter(feeds.values()))
    raise AssertionError(f"no batch holds sample {start}")


def _worst_image(obs: Observation) -> int:
    per_image = np.asarray(obs.metrics.per_image_mae if obs.metrics else (), dtype=np.float64)
    if per_image.size == 0:
        return 0
    return int(np.argmax(np.where(np.isnan(per_image), np.inf, per_image)))


def explain_flagged(observations: list[Observation], explainer: Explainer) -> list[Observation]:
    """The explain pass, after the observe stage and before the judge's last word: each row the judge flags
    (``judge.wanted``) gets what explains it; every other row is handed on as it is."""
    passing = frozenset(o.name for o in observations if passes_on_values(o, explainer.config.thresholds))
    return [explainer(obs, passing) for obs in observations]


class Explainer:
    """Adds per-layer tables to the rows the judge asks them for. ``probe`` and ``plan`` are the
    diagnostics' (``diagnostics.run.Diagnoser``): the same images, within the same budget."""

    def __init__(self, config: RunConfig, golden: GoldenSet, model: Any, probe: Feeds, plan: shapes.SizePlan, progress: Any,
                 ctx: BuildContext | None = None) -> None:
        self.config, self.golden, self.model, self.probe, self.plan, self.progress = config, golden, model, probe, plan, progress
        self.ctx = ctx  # the run's build context: the ExecuTorch tables rebuild the program from it (diagnostics.etdump)
        self.main = plan.main  # the replay's batch size over the probe
        self.threshold = config.thresholds.reference_mae  # the per-layer tables' threshold

    def __call__(self, obs: Observation, passing: frozenset[str] = frozenset()) -> Observation:
        """``obs`` with its per-layer table and its reduced subgraph when the judge wants them; as it is otherwise.
        ``passing``: the rows that pass on their values (a source among them stands for eager in the reduction)."""
        measured, config = obs.diagnostics, self.config
        if measured is None or measured.error is not None or obs.artifact is None or obs.name not in KINDS_BY_NAME:
            return obs
        want = wanted(obs, config.thresholds, config.diagnose)  # a per-layer table leaves what is wanted as it is
        if want.layers:
            obs = self._layers(obs, measured)
        if want.reduction and obs.diagnostics is not None:
            with captured_warnings([]):  # the runtime's words about the subgraphs it is handed, not about the row
                reduced = self._reduced(obs, passing)
            obs = replace(obs, diagnostics=replace(obs.diagnostics, reduced=reduced, seconds=obs.diagnostics.seconds + reduced.seconds))
        return obs

    def _layers(self, obs: Observation, measured: Measured) -> Observation:
        config = self.config
        assert obs.artifact is not None
        signature = self.golden.signature
        purpose = DIVERGENCE if FAMILIES[obs.family].layers == "on-fail" else INT8_LAYERS
        if len(signature.inputs) > 1:
            layers = LayerComparison(purpose=purpose, method="", scope="", batch_start=0, batch_size=0, threshold=self.threshold,
                                     layers=(), first=None, error="per-layer tables compare models with one input; this one has "
                                     f"{len(signature.inputs)} ({', '.join(signature.input_names)})")
            return replace(obs, diagnostics=replace(measured, layers=layers))
        kind, path = KINDS_BY_NAME[obs.name], Path(obs.artifact.path)
        warnings_seen: list[str] = []
        with captured_warnings(warnings_seen):
            if purpose == DIVERGENCE:
                start, batch = self._failing_batch(obs, measured)
                self.progress(f"locating where {obs.name} diverges (batch of {len(batch)} at {start})")
            else:
                start, batch = 0, next(iter(self.probe.values()))[: self.plan.layer_images or self.main]
            began = time.perf_counter()
            layers = compare_layers(kind, path, self.model, batch, self.threshold, purpose, config.threads, start, self.ctx)
            layers = replace(layers, seconds=time.perf_counter() - began)
        notes = measured.notes + tuple(n for n in dedupe(warnings_seen) if n not in obs.notes and n not in measured.notes)
        return replace(obs, diagnostics=replace(measured, layers=layers, notes=notes, seconds=measured.seconds + layers.seconds))

    def _failing_batch(self, obs: Observation, measured: Measured) -> tuple[int, np.ndarray]:
        """Where to look: when the replay passes its gate but a batch size does not, the probe batch at
        that size holding its worst image; otherwise the replay's batch holding the worst image (bounded
        by the plan: the worst image and the ones after it)."""
        gate = self.config.thresholds.gate_for(obs.family)
        if obs.metrics is not None and not gate_reasons(obs.metrics, gate) and measured.sizes is not None:
            images = next(iter(self.probe.values()))
            every = (*measured.sizes.runs, *(run for _, runs in measured.sizes.outputs for run in runs))
            for run in every:
                if run.error is None and run.size != self.main and size_gate_reasons(run, gate):
                    worst = run.worst_image or 0
                    start = min(worst // run.size * run.size, max(len(images) - run.size, 0))
                    return start, images[start : start + run.size]
        batch_size, worst = self.config.batch_size, _worst_image(obs)
        start = worst // batch_size * batch_size
        batch = _batch_at(self.golden, batch_size, start)
        if self.plan.layer_images:
            keep = min(max(worst - start, 0), max(len(batch) - self.plan.layer_images, 0))
            start, batch = start + keep, batch[keep : keep + self.plan.layer_images]
        return start, batch

    def _reduced(self, obs: Observation, passing: frozenset[str] = frozenset()) -> Reduced:
        """The row's smallest failing subgraph (``diagnostics.reduce``), from its worst samples, under its gate; ``passing``:
        the rows that pass on their values (the row's source among them stands for eager)."""
        from ..diagnostics import reduce

        assert obs.artifact is not None
        kind, path = KINDS_BY_NAME[obs.name], Path(obs.artifact.path)
        gate = self.config.thresholds.gate_for(obs.family)
        source = path.parent / KINDS_BY_NAME[kind.source].filename() if kind.source in KINDS_BY_NAME else None
        level = dict(obs.details).get("graph_optimization_level", "ORT_ENABLE_ALL")
        self.progress(f"reducing {obs.name} to its smallest failing subgraph")
        try:
            samples = [(i, self._sample(i)) for i in _failing_samples(obs)]
            return reduce.reduce_row(obs.name, path, source if source is not None and source.is_file() else None, self.model,
                                     samples, self._judge(gate), gate.describe(), path.parent / "reduced", self.config.threads, level,
                                     source_passed=kind.source in passing)
        except Exception as exc:  # advice: it never takes the report down
            return Reduced(gate=gate.describe(), error=f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}")

    def _sample(self, index: int) -> dict[str, np.ndarray]:
        signature = self.golden.signature
        return next(feeds for _, feeds in stack_batches([self.golden.load_sample(self.golden.inputs[index])], signature.inputs, 1))

    def _judge(self, gate: Any):
        """The row's gate on one tensor of the subgraph: a graph output as the signature declares it, any other as values,
        an inner one measured by only the streams the gate bounds (a bisection judges hundreds of tensors: cosine and SNR
        on each were 15 % of a 14 M model's reduction, under a gate that bounds neither)."""
        specs = {o.name: o for o in self.golden.signature.outputs}
        tolerances = (gate.tolerance,) if gate.tolerance is not None else ()
        k = top_k_of(gate)
        streams = streams_of(gate)

        def judge(name: str, reference: np.ndarray, got: np.ndarray) -> Metrics | None:
            spec = specs.get(name)
            accumulator = ErrorAccumulator(spec.kind if spec else "values", spec.class_axis if spec else -1, tolerances=tolerances,
                                           top_ks=(k,) if k else (), ctc_blank=spec.ctc_blank if spec else None,
                                           streams=STREAMS if spec else streams)
            if spec is not None:
                accumulator.add(to_samples_first(reference, spec.batch_axis), to_samples_first(got, spec.batch_axis))
            else:  # a value inside the graph, of the one sample: one row of values, whatever its layout (a scalar too)
                accumulator.add(reference.reshape(1, -1), got.reshape(1, -1))
            metrics = accumulator.result()
            return metrics if gate_reasons(metrics, gate) else None

        return judge


def _failing_samples(obs: Observation) -> list[int]:
    """The samples to reduce on, the likeliest to fail the gate alone first: the worst image by MAE, the
    one holding the largest error, the first whose top-1 changed."""
    m = obs.metrics
    found = [_worst_image(obs)]
    if m is not None and m.max_abs_at is not None:
        found.append(m.max_abs_at.sample)
    if m is not None and m.top1_changed:
        found.append(m.top1_changed[0])
    return list(dict.fromkeys(found))
