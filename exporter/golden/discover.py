"""What recording a format-2 golden set learns about the model: its signature and its outputs.

- :func:`input_specs`: the named inputs from the sample files (names, order, dtypes, varying axes),
  checked against ``forward``'s parameters, with ``[tool.export-check.model-inputs.NAME]`` applied.
- :func:`run_outputs`: eager over the samples, batched as the replay batches them
  (``goldenset.stack_batches``): the output names, each output's spec (default kind, settings
  applied, batch axis validated on at least two batch sizes, varying axes) and every sample's
  output without its batch axis (the reference).

Every problem is one :class:`GoldenError` line naming the file or the checkpoint and the fix.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ArtifactError, GoldenError, describe_exception
from ..feeds import length
from ..model import EagerRunner
from ..signature import NORMALISED_TOLERANCE, InputSpec, KindChoice, OutputSpec, Signature, SignatureSettings, choose_kind, ctc_problem
from .goldenset import stack_batches, stack_samples
from .inputs import SAMPLE_DTYPES

LOGITS_KINDS = ("logits", "sequence-logits")


def _symbol(name: str, axis: int) -> str:
    """A dynamic axis's symbol nobody named: ``<name>_<axis>`` as an identifier."""
    return re.sub(r"\W|^(?=\d)", "_", f"{name}_{axis}")


def batched_axis(sample_axis: int, batch_axis: int) -> int:
    """A sample's axis numbered on the batched array (the batch axis inserted at ``batch_axis``)."""
    return sample_axis if sample_axis < batch_axis else sample_axis + 1


def sample_axis(axis: int, ndim: int, batch_axis: int) -> int:
    """A batched array's axis (negative counts from the end) numbered on one sample (batch axis removed)."""
    axis = axis % ndim
    return axis if axis < batch_axis else axis - 1


# --- inputs ---------------------------------------------------------------------------------------


def _forward_parameters(model: Any) -> list[inspect.Parameter] | None:
    try:
        return list(inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError, AttributeError):
        return None


def _parameters_text(params: list[inspect.Parameter]) -> str:
    """forward's parameters as people read them: names, ``*`` before keyword-only ones, ``=...`` for defaults."""
    kinds = inspect.Parameter
    parts, star = [], False
    for p in params:
        if p.kind is kinds.KEYWORD_ONLY and not star:
            parts.append("*")
            star = True
        prefix = "*" if p.kind is kinds.VAR_POSITIONAL else "**" if p.kind is kinds.VAR_KEYWORD else ""
        star = star or p.kind is kinds.VAR_POSITIONAL
        parts.append(f"{prefix}{p.name}" + ("=..." if p.default is not kinds.empty else ""))
    return ", ".join(parts)


def _check_forward(model: Any, names: list[str], keyword: set[str], shown: Path) -> None:
    """The positional inputs must be forward's positional parameters, in order; the keyword ones its
    parameters too; every parameter without a default must be given."""
    params = _forward_parameters(model)
    if params is None:
        return
    kinds = inspect.Parameter
    takes = f"{type(model).__name__}.forward({_parameters_text(params)})"
    fix = ("name the arrays after forward's parameters, in its order, or mark an input keyword = true in "
           "[tool.export-check.model-inputs.NAME]")
    if any(p.kind is kinds.VAR_POSITIONAL for p in params):
        return  # forward(*args): any names, in the file's order
    positional = [p for p in params if p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD)]
    given = [n for n in names if n not in keyword]
    if given != [p.name for p in positional[: len(given)]] or len(given) > len(positional):
        raise GoldenError(f"{shown}: holds inputs {', '.join(names)} (passed by position: {', '.join(given) or 'none'}), "
                          f"but the model takes {takes}; {fix}")
    by_name = {p.name: p for p in params}
    any_keyword = any(p.kind is kinds.VAR_KEYWORD for p in params)
    for name in keyword:
        param = by_name.get(name)
        if (param is None and not any_keyword) or (param is not None and param.kind is kinds.POSITIONAL_ONLY):
            raise GoldenError(f"{shown}: input {name} is passed by keyword, but the model takes {takes}; {fix}")
    missing = [p.name for p in params[len(given):] if p.default is kinds.empty and p.name not in keyword
               and p.kind not in (kinds.VAR_KEYWORD, kinds.VAR_POSITIONAL)]
    if missing:
        raise GoldenError(f"{shown}: holds no input {', '.join(missing)}, which the model takes ({takes}); add it to every sample")


def input_specs(model: Any, samples: Sequence[Mapping[str, np.ndarray]], files: Sequence[Path],
                settings: SignatureSettings) -> tuple[InputSpec, ...]:
    """The named inputs of samples read from ``files`` (raw arrays, file order): every file holds the
    first file's names, one dtype and one number of axes per name; the order is the first file's
    (a ``.safetensors`` file has none of its own: forward's), checked against ``forward``."""
    first, shown = samples[0], files[0]
    names = list(first)
    params = _forward_parameters(model) or []
    if shown.suffix.lower() == ".safetensors":
        order = {p.name: i for i, p in enumerate(params)}
        names.sort(key=lambda n: order.get(n, len(order)))
    unknown = [n for n in settings.inputs if n not in names]
    if unknown:
        raise GoldenError(f"[tool.export-check.model-inputs.{unknown[0]}]: the samples hold no input {unknown[0]!r} "
                          f"(they hold {', '.join(names)}); fix the name")
    for sample, path in zip(samples, files, strict=True):
        if set(sample) != set(names):
            missing = [n for n in names if n not in sample]
            extra = [n for n in sample if n not in names]
            what = "; ".join(([f"no {', '.join(missing)}"] if missing else []) + ([f"unexpected {', '.join(extra)}"] if extra else []))
            raise GoldenError(f"{path}: holds inputs {', '.join(sample)} ({what}), but {shown.name} holds {', '.join(names)}; "
                              "every sample holds the same named inputs")
        for name in names:
            a, b = sample[name], first[name]
            if a.dtype != b.dtype and "dtype" not in settings.inputs.get(name, {}):
                raise GoldenError(f"{path}: input {name} holds {a.dtype} but {shown.name} holds {b.dtype}; save every sample's {name} "
                                  f"as one dtype, or set dtype in [tool.export-check.model-inputs.{name}]")
            if a.ndim != b.ndim:
                raise GoldenError(f"{path}: input {name} has shape {tuple(a.shape)} but {shown.name} has {tuple(b.shape)}; "
                                  "every sample's input has the same number of axes")
    keyword_only = {p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}
    specs = []
    symbols: dict[tuple[int, ...], str] = {}  # an axis's size per sample -> its symbol: axes that change in step share one
    for name in names:
        spec = settings.apply_input(InputSpec(name=name, dtype=str(first[name].dtype), keyword=name in keyword_only))
        ndim = first[name].ndim
        if spec.batch_axis > ndim:
            raise GoldenError(f"{shown}: input {name} has shape {tuple(first[name].shape)} without its batch axis, so its batch axis "
                              f"is one of 0..{ndim}, not {spec.batch_axis}; fix batch-axis in [tool.export-check.model-inputs.{name}]")
        if "dynamic_axes" not in settings.inputs.get(name, {}):
            dynamic = []
            for j in range(ndim):
                sizes = tuple(int(s[name].shape[j]) for s in samples)
                if len(set(sizes)) > 1:
                    axis = batched_axis(j, spec.batch_axis)
                    dynamic.append((axis, symbols.setdefault(sizes, _symbol(name, axis))))
            spec = replace(spec, dynamic_axes=tuple(dynamic))
        specs.append(spec)
    _check_forward(model, [s.name for s in specs], {s.name for s in specs if s.keyword}, shown)
    return tuple(specs)


# --- outputs ---------------------------------------------------------------------------------------


def _axis_error(checkpoint: Path, name: str, shape: tuple[int, ...], n: int, batch_axis: int) -> GoldenError:
    candidates = [axis for axis, size in enumerate(shape) if size == n]
    head = f"{checkpoint}: output {name} has shape {shape} for a batch of {n}: its axis {batch_axis} is not the batch"
    if len(candidates) == 1:
        k = candidates[0]
        return GoldenError(f"{head}; if the batch is axis {k}, set batch-axis = {k} in [tool.export-check.outputs.{name}]")
    return GoldenError(f"{head}; set batch-axis in [tool.export-check.outputs.{name}] to the axis that holds the samples")


def _infer(runner: EagerRunner, feeds: Mapping[str, np.ndarray], checkpoint: Path, start: int, n: int) -> dict[str, np.ndarray]:
    try:
        return runner.infer(feeds)
    except ArtifactError as exc:
        raise GoldenError(f"{checkpoint}: {exc}") from None
    except Exception as exc:
        raise GoldenError(f"{checkpoint}: the model fails on golden samples {start}..{start + n - 1} ({describe_exception(exc)}); "
                          "check that --arch and the samples match the model") from None


def run_outputs(
    model: Any, samples: Iterable[Mapping[str, np.ndarray]], inputs: tuple[InputSpec, ...], settings: SignatureSettings,
    checkpoint: Path, batch_size: int, existing: Signature | None = None, labels: Sequence[int] = (),
    whys: dict[str, str] | None = None,
) -> tuple[tuple[OutputSpec, ...], dict[str, list[np.ndarray]]]:
    """Eager over ``samples`` (conformed to ``inputs``) in the replay's batches: the outputs' specs
    (``existing``'s where it has the output, else the default kind; the settings over either) and
    every sample's output without its batch axis.

    ``samples`` may be a generator: each batch is dropped once eager has run on it (only its input
    shapes are kept), so memory holds the outputs, not every decoded input.

    Each output's batch axis must hold the batch on every run; so that a fixed axis that happens to
    equal the batch size cannot pass, at least two batch sizes are run (the first sample alone, or
    twice, when the batches have one size).

    A default kind reads the evidence beyond the shape (``golden.evidence``: the layer that returned each output, its
    values, ``labels``, the other outputs); each output's reason is put in ``whys`` (``golden record`` says it).
    """
    runner = EagerRunner(model, Signature(inputs=inputs, outputs=()))
    runs: list[tuple[int, int, dict[str, tuple[int, ...]], dict[str, np.ndarray]]] = []  # (start, n, input shapes, outputs)
    first_sample: Mapping[str, np.ndarray] | None = None

    def kept_first(stream: Iterable[Mapping[str, np.ndarray]]) -> Iterator[Mapping[str, np.ndarray]]:
        nonlocal first_sample
        for sample in stream:
            if first_sample is None:
                first_sample = sample
            yield sample

    for start, feeds in stack_batches(kept_first(samples), inputs, batch_size):
        n = length(feeds, Signature(inputs=inputs, outputs=()))
        out = _infer(runner, feeds, checkpoint, start, n)
        if runs and list(out) != list(runs[0][3]):
            raise GoldenError(f"{checkpoint}: the model returns outputs {', '.join(out)} on samples {start}.., but {', '.join(runs[0][3])} "
                              "on the first; export-check records one output structure")
        runs.append((start, n, {name: tuple(array.shape) for name, array in feeds.items()}, out))
    if first_sample is None:
        raise GoldenError(f"{checkpoint}: no samples to record")
    sizes = {n for _, n, _, _ in runs}
    probes = []
    if len(sizes) < 2:
        k = 1 if 1 not in sizes else 2
        out = _infer(runner, stack_samples([first_sample] * k, inputs), checkpoint, 0, k)
        if list(out) != list(runs[0][3]):
            raise GoldenError(f"{checkpoint}: the model returns outputs {', '.join(out)} on a batch of {k}, but {', '.join(runs[0][3])} "
                              f"on a batch of {runs[0][1]}; export-check records one output structure")
        probes.append((k, out))
    names = list(runs[0][3])
    unknown = [n for n in settings.outputs if n not in names]
    if unknown:
        raise GoldenError(f"[tool.export-check.outputs.{unknown[0]}]: the model has no output {unknown[0]!r} "
                          f"(its outputs: {', '.join(names)}); fix the name")
    specs = []
    reference: dict[str, list[np.ndarray]] = {}
    evidence = _evidence(model, runner, first_sample, inputs, names, runs, labels)
    for name in names:
        first = runs[0][3][name]
        dtype = str(first.dtype)
        if dtype not in SAMPLE_DTYPES:
            raise GoldenError(f"{checkpoint}: output {name} is {dtype}; export-check records outputs of {', '.join(SAMPLE_DTYPES)}")
        if existing is not None and name in existing.output_names:
            base = existing.output(name)
        else:
            choice = kind_of(name, first.ndim, dtype, [out[name] for _, _, _, out in runs], evidence.get(name))
            base = OutputSpec(name=name, kind=choice.kind)
            if whys is not None:
                whys[name] = choice.why
        spec = settings.apply_output(base)
        checked = [(n, out[name]) for _, n, _, out in runs] + [(n, out[name]) for n, out in probes]
        failing = [(n, a) for n, a in checked if a.ndim <= spec.batch_axis or a.shape[spec.batch_axis] != n]
        if failing:
            unique = [(n, a) for n, a in failing if sum(1 for size in a.shape if size == n) == 1]
            n, a = (unique or failing)[0]
            raise _axis_error(checkpoint, name, tuple(a.shape), n, spec.batch_axis)
        for _, _, _, out in runs:
            if str(out[name].dtype) != dtype or out[name].ndim != first.ndim:
                raise GoldenError(f"{checkpoint}: output {name} is {out[name].dtype} {tuple(out[name].shape)} on one batch and {dtype} "
                                  f"{tuple(first.shape)} on the first; export-check records one dtype and number of axes per output")
        if spec.kind in LOGITS_KINDS:
            ca = spec.class_axis
            if not -first.ndim <= ca < first.ndim or ca % first.ndim == spec.batch_axis:
                raise GoldenError(f"{checkpoint}: output {name} of shape {tuple(first.shape)} is {spec.kind} over class axis {ca}, "
                                  f"which is {'its batch axis' if -first.ndim <= ca < first.ndim else 'not one of its axes'}; set "
                                  f"class-axis, or kind = \"values\", in [tool.export-check.outputs.{name}]")
        blank_problem = ctc_problem(spec, tuple(first.shape[:spec.batch_axis] + first.shape[spec.batch_axis + 1:]))
        if blank_problem is not None:
            raise GoldenError(f"{checkpoint}: {blank_problem}; fix ctc-blank in [tool.export-check.outputs.{name}]")
        if "dynamic_axes" not in settings.outputs.get(name, {}):
            spec = replace(spec, dynamic_axes=_dynamic_axes(name, spec.batch_axis, runs, inputs))
        values: list[np.ndarray] = []
        for _, n, _, out in runs:
            array = out[name]
            if array.dtype.kind == "f" and not np.all(np.isfinite(array)):
                bad = int(array.size - np.count_nonzero(np.isfinite(array)))
                raise GoldenError(f"{checkpoint}: the model produced {bad} NaN/Inf values in output {name}; "
                                  "refusing to record them as the reference")
            # np.asarray, not np.ascontiguousarray: that returns at least 1-D, so a (batch,) output's
            # per-sample 0-d values were stored as (1,) and the next check failed on (N,) != (N, 1)
            values.extend(np.asarray(np.take(array, j, axis=spec.batch_axis), order="C") for j in range(n))
        if spec.compared and not any(v.size for v in values):
            raise GoldenError(f"{checkpoint}: output {name} has no values (shape {tuple(first.shape)}): a comparison over nothing "
                              f"would pass; return an output with values, or set compare = false in [tool.export-check.outputs.{name}]")
        specs.append(spec)
        reference[name] = values
    return tuple(specs), reference


UNIT_NORM_TOLERANCE = 1e-3


def kind_of(name: str, ndim: int, dtype: str, arrays: Sequence[np.ndarray], evidence: KindChoice | None = None) -> KindChoice:
    """The default kind of output ``name`` (``ndim`` axes, the batch's included) and why, from its values:
    ``arrays`` are batches or single samples, whose last axis is the output's last axis (signature.choose_kind);
    ``evidence``: ``golden.evidence``'s for it.
    """
    classes = int(arrays[0].shape[-1]) if arrays and arrays[0].ndim else 0
    flat = normalised(arrays)
    return choose_kind(ndim, dtype, classes, unit_norm(arrays), name, flat, not flat and layer_normed(arrays), evidence)


def _evidence(model: Any, runner: EagerRunner, sample: Mapping[str, np.ndarray] | None, inputs: tuple[InputSpec, ...],
              names: Sequence[str], runs: Sequence[tuple[int, int, Any, Mapping[str, np.ndarray]]], labels: Sequence[int]
              ) -> dict[str, KindChoice]:
    """``golden.evidence.gather`` on this recording: the layers seen on a batch of the first sample twice."""
    from . import evidence

    made_by = {} if sample is None else evidence.producers(model, lambda: runner.call(stack_samples([sample, sample], inputs)))
    firsts = {n: runs[0][3][n] for n in names}
    arrays = {n: [out[n] for _, _, _, out in runs] for n in names}
    return evidence.gather(names, firsts, arrays, made_by, labels)


def normalised(arrays: Sequence[np.ndarray]) -> bool:
    """Whether every position of a float output (every vector along its last axis, of 4 values or more) has
    mean 0 and standard deviation 1, as a LayerNorm without a trained affine leaves hidden states.

    >>> h = np.array([[1.0, -1.0, 1.0, -1.0], [2.0, 0.0, 0.0, -2.0]], dtype=np.float32)
    >>> normalised([h[:1]]), normalised([h]), normalised([h[:1, :2]])
    (True, False, False)
    """
    vectors = _float_vectors(arrays, 4)
    return vectors is not None and all(np.abs(v.mean(axis=-1)).max() <= NORMALISED_TOLERANCE
                                       and np.abs(v.std(axis=-1) - 1.0).max() <= NORMALISED_TOLERANCE for v in vectors)


# layer_normed: the smallest singular value of the positions (centred) against the largest, below which they meet an exact
# linear relation, and the second smallest, above which it is one relation only. Measured (float32): a LayerNorm's output
# 3.6e-8 to 6.0e-8 (this repo's trained token classifier, both its encoder layers; a BERT from a config, with and without
# a random scale and shift), second 0.05 to 0.29; class logits and log-probabilities 0.012 to 0.099 (the bundled ResNet,
# the recogniser, the token classifier); softmax 1.7e-8 (told apart: probabilities); a linear head of fewer inputs than
# outputs has many such values (its second is 2e-8 too).
LAYER_NORMED_SMALLEST, LAYER_NORMED_SECOND = 1e-5, 1e-3
LAYER_NORMED_MAX_WIDTH = 1024  # wider last axes (a vocabulary's logits) are not tested: the SVD's cost (3.1 s at 1024, 8192 positions)


def layer_normed(arrays: Sequence[np.ndarray]) -> bool:
    """Whether a float output's positions (every vector along its last axis, of 4 to 1024 values) are a LayerNorm's
    output with its learnt scale and shift: ``γ·x̂ + β`` with every ``x̂`` summing to 0, so ``Σ_c (y_c - β_c)/γ_c = 0`` on
    every position: one exact linear relation among the last axis' values, weighing every value, which class scores
    do not meet. Needs twice as many positions as values per position; probabilities (one relation too: they sum to
    1) and a constant or duplicated score (a relation on one or two values) are not.

    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(size=(200, 8)); x = (x - x.mean(-1, keepdims=True)) / x.std(-1, keepdims=True)
    >>> h = (x * rng.uniform(0.5, 1.5, 8) + rng.uniform(-0.3, 0.3, 8)).astype(np.float32)
    >>> scores = rng.normal(size=(200, 8)).astype(np.float32)
    >>> layer_normed([h]), layer_normed([scores]), layer_normed([h[:10]]), layer_normed([np.where(np.arange(8) == 3, 0, scores)])
    (True, False, False, False)
    """
    vectors = _float_vectors(arrays, 4)
    if vectors is None or len({v.shape[-1] for v in vectors}) != 1:  # a last axis that changes size holds no channels
        return False
    rows = np.concatenate([v.reshape(-1, v.shape[-1]) for v in vectors])
    width = rows.shape[1]
    if width > LAYER_NORMED_MAX_WIDTH or len(rows) < 2 * width or np.all(rows >= 0):
        return False
    rows = rows[:: max(1, len(rows) // (4 * width))]  # enough positions for the test, at bounded cost
    _, singular, axes = np.linalg.svd(rows - rows.mean(axis=0), full_matrices=False)
    if singular[0] == 0 or not (singular[-1] / singular[0] < LAYER_NORMED_SMALLEST and singular[-2] / singular[0] > LAYER_NORMED_SECOND):
        return False
    # the relation weighs every value (by 1/γ): a relation on a few (a constant class score, a duplicated one) is not it
    weights = np.abs(axes[-1])
    return bool(np.mean(weights > 0.1 * weights.max()) >= 0.9)


def unit_norm(arrays: Sequence[np.ndarray]) -> bool:
    """Whether every sample (and position) of a float output has L2 norm 1 along its last axis and is not a probability
    distribution (a confident softmax has L2 norm near 1 too): an embedding, which no class axis describes.

    >>> v = np.array([[0.6, -0.8], [1.0, 0.0]], dtype=np.float32)
    >>> unit_norm([v]), unit_norm([np.array([[0.9995, 0.0005]], dtype=np.float32)]), unit_norm([2 * v])
    (True, False, False)
    """
    vectors = _float_vectors(arrays, 2)
    if vectors is None or not all(np.allclose(np.linalg.norm(v, axis=-1), 1.0, rtol=0, atol=UNIT_NORM_TOLERANCE) for v in vectors):
        return False
    probabilities = all(np.all(v >= 0) and np.allclose(v.sum(axis=-1), 1.0, rtol=0, atol=UNIT_NORM_TOLERANCE) for v in vectors)
    return not probabilities


def _float_vectors(arrays: Sequence[np.ndarray], width: int) -> list[np.ndarray] | None:
    """``arrays`` in float64 when each is a non-empty, finite float array whose last axis (the vectors the value
    rules above read) has ``width`` values or more; None otherwise (no rule on values applies)."""
    if not arrays or any(a.dtype.kind != "f" or a.ndim < 1 or a.shape[-1] < width or a.size == 0 or not np.all(np.isfinite(a))
                         for a in arrays):
        return None
    return [a.astype(np.float64) for a in arrays]


def _dynamic_axes(name: str, batch_axis: int, runs: Sequence[tuple[int, int, Mapping[str, tuple[int, ...]], Mapping[str, np.ndarray]]],
                  inputs: Sequence[InputSpec]) -> tuple[tuple[int, str], ...]:
    """The output's axes (but the batch) whose size changes between batches; an axis that changes in
    step with an input's dynamic axis takes that axis's symbol."""
    ndim = runs[0][3][name].ndim
    steps: dict[str, list[int]] = {}  # an input's dynamic axis -> its size per run
    for spec in inputs:
        for axis, symbol in spec.dynamic_axes:
            steps.setdefault(symbol, [f[spec.name][axis] if len(f[spec.name]) > axis else -1 for _, _, f, _ in runs])
    out = []
    for axis in range(ndim):
        if axis == batch_axis:
            continue
        sizes = [o[name].shape[axis] for _, _, _, o in runs]
        if len(set(sizes)) > 1:
            shared = [symbol for symbol, step in steps.items() if step == sizes]
            out.append((axis, shared[0] if shared else _symbol(name, axis)))
    return tuple(out)


__all__ = ["input_specs", "run_outputs", "kind_of", "batched_axis", "sample_axis", "LOGITS_KINDS"]
