"""The artifact contract: the kind as a typed row, the build context, and the runner protocol.

A runner is a context manager whose ``infer`` takes named inputs and returns named outputs,
``infer(feeds: Mapping[str, ndarray]) -> dict[str, ndarray]``, for every artifact and for the eager
model alike (``model.EagerRunner``). While the golden set holds one input, the feed is
``{"input": batch}``; a single-tensor output is named ``"logits"`` (the name the ONNX export
gives it), a tuple's members ``output_0``, ``output_1``, ... Judging looks at the first output
(``logits_of``) until reports carry several.

"""

from __future__ import annotations

import importlib
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import ArtifactError
from ..signature import SINGLE, Signature, positional_names

if TYPE_CHECKING:
    import numpy as np

INPUT = "input"  # the one input's name while the golden set holds one
OUTPUT = "logits"  # a single-tensor output's name
# Images the diagnostics run through every file: the first PROBE_IMAGES of the golden set (or the main batch, if larger).
# A kind whose file is planned for a batch bound plans for at least this many (executorch_pte.BATCH_MAX).
PROBE_IMAGES = 64

# How a runner says an input passed the size its file was planned for (executorch_pte: a bounded dynamic axis);
# the judge then names that bound as the cause of the refused batch size (``size_refused_cause``), not a specialised export.
BEYOND_BOUND = "above the bound of"


def beyond_bound(what: str, bound: int, where: str) -> str:
    """
    >>> beyond_bound("batch 64", 32, "the .pte")
    'batch 64 above the bound of 32 planned in the .pte'
    """
    return f"{what} {BEYOND_BOUND} {bound} planned in {where}"


class NotApplicable(ArtifactError):
    """The kind does not apply to this model (dynamic int8 on a model with no layer it quantizes, an
    exporter that cannot take the model's inputs): a row of its own, shown and explained, that does
    not fail the run unless ``--strict``."""


def feeds_to_args(feeds: Mapping[str, Any], signature: Signature) -> tuple[list[Any], dict[str, Any]]:
    """Named inputs as a model call takes them: by position in the signature's order, or by keyword."""
    if signature is SINGLE or len(signature.inputs) == 1 and len(feeds) == 1:
        return [single_input(feeds)], {}
    missing = [i.name for i in signature.inputs if i.name not in feeds]
    if missing or len(feeds) != len(signature.inputs):
        raise ArtifactError(f"takes inputs {', '.join(signature.input_names)}; got {', '.join(feeds)}")
    return [feeds[i.name] for i in signature.inputs if not i.keyword], {i.name: feeds[i.name] for i in signature.inputs if i.keyword}


def positional_inputs(feeds: Mapping[str, Any], signature: Signature) -> list[Any]:
    """Named inputs as a runtime that takes a list takes them: the positional ones in the signature's
    order, then the keyword ones (``feeds_to_args``, flattened)."""
    args, kwargs = feeds_to_args(feeds, signature)
    return [*args, *kwargs.values()]


def listed_outputs(values: list[Any], signature: Signature) -> dict[str, Any]:
    """A runtime's outputs, a list in the model's order, named as the golden set names them (one output:
    ``logits``); ``output_0``, ``output_1``, ... when their count is not the signature's."""
    names = (OUTPUT,) if signature is SINGLE else signature.output_names
    if len(names) != len(values):
        names = positional_names(len(values))
    return dict(zip(names, values, strict=True))


class Runner(Protocol):
    """A loaded artifact (or the eager model): named inputs in, named outputs out."""

    def __enter__(self) -> Runner: ...

    def __exit__(self, *exc: object) -> None: ...

    def infer(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]: ...


def ran_for(runner: Any, began: float) -> float:
    """The seconds ``runner``'s last ``infer`` (begun at ``began``, perf_counter) took where it ran: a runner in a replay
    process (builder/clean.py) measures the call there, without the cost of sending its inputs and outputs; any other
    the wall time since ``began``. What every latency and per-size time is read with."""
    inside = getattr(runner, "last_seconds", None)
    return float(inside) if inside is not None else time.perf_counter() - began


@dataclass(frozen=True)
class ModelRecipe:
    """How another process builds the run's model itself instead of being sent it (issue 43): the build server reads
    the checkpoint (mapped from the file, so both processes share one copy of the weights) into the same architecture,
    and builds from it only when its ``fingerprint`` (model.fingerprint) equals the run's; otherwise the run's
    process builds in a child of its own, which holds its model already."""

    checkpoint: str
    arch: str
    arch_kwargs: tuple[tuple[str, Any], ...]
    arch_root: str | None
    fingerprint: str


@dataclass(frozen=True)
class BuildContext:
    """What every builder may use: the eager model, an example batch of real golden inputs (one
    tensor, or ``{input name: tensor}``), the model's signature and the export settings."""

    model: Any  # torch.nn.Module in eval mode
    example: Any  # torch.Tensor (the one input) or dict[str, torch.Tensor]
    opset: int
    onnx_exporter: str
    threads: int
    signature: Signature = SINGLE
    # The golden set's calibration split (``GoldenSet.calibration``) as batches of named inputs, for
    # the statically quantized kinds; empty when the run has none (the kind then refuses to build).
    calibration: tuple[dict[str, Any], ...] = ()
    # How the build server builds the model itself (never sent pickled); None: it is sent with the context.
    recipe: ModelRecipe | None = None
    fp16_optimization: str = "all"  # RunConfig.fp16_optimization: the level the onnx-fp16 row loads and runs at
    # Per declared dynamic input axis (not the batch), the longest size the golden set holds: (input, axis, size).
    # The on-device kinds bound such an axis from it (executorch_pte.axis_bound); empty: the example's size is used.
    axis_extents: tuple[tuple[str, int, int], ...] = ()
    # Each distinct combination of the declared dynamic input axes' sizes (not the batch) in the golden set, as
    # ((input, axis, size), ...), sorted. litert converts one signature per combination when its file keeps those
    # axes at the example's sizes; empty: only the example's sizes are known.
    axis_sizes: tuple[tuple[tuple[str, int, int], ...], ...] = ()

    def example_args(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The example as the model takes it: positional tensors in the signature's order, and keywords."""
        if not isinstance(self.example, Mapping):
            return (self.example,), {}
        args = tuple(self.example[i.name] for i in self.signature.inputs if not i.keyword)
        kwargs = {i.name: self.example[i.name] for i in self.signature.inputs if i.keyword}
        return args, kwargs

    def dynamic_axes(self) -> dict[str, dict[int, str]]:
        """Per input and output name, its batch axis and declared dynamic axes, as torch.onnx.export takes them."""
        axes: dict[str, dict[int, str]] = {}
        for name, batch_axis, dynamic in ((s.name, s.batch_axis, s.dynamic_axes) for s in self.signature.inputs):
            axes[name] = {batch_axis: "batch", **dict(dynamic)}
        for name, batch_axis, dynamic in ((s.name, s.batch_axis, s.dynamic_axes) for s in self.signature.outputs):
            axes[name] = {batch_axis: "batch", **dict(dynamic)}
        return axes


# The facts a row of the kind table must state: the contract test (tests/unit/artifacts/test_kinds.py)
# fails on a row that leaves one out, and nothing else in the tool keeps a list of kinds.
#   build_rank: its place in the build order (lower first; a derived kind after its source)
#   groups:     the --artifacts groups that hold it besides "all" (artifacts.GROUP_NAMES)
#   packages:   the distributions (package-index names) that build, load or run it, its source's
#               included: the cache keys its entry on their versions, the report records them
#   layers:     its per-layer method, the module of diagnostics/layers/ that holds it ("onnx": diagnostics.layers.onnx),
#               or None: no per-layer table; named by a string, as the kinds never import the diagnostics
#   preload:    the modules its build imports that the build server imports itself, once, so that every
#               build child inherits them: a default kind's while idle, in every run (artifacts.PRELOAD);
#               another kind's before its first build's child is forked (it runs in few runs)
#   options:    the run settings (RunConfig fields) its build or its runner reads, its source's included
#   activation_scales: how its int8 activations are scaled: "dynamic" (computed from each batch at run time, so an
#               output moves with its batch-mates by design), "static" (fixed at calibration: an output must not move
#               with the batch), or None (no int8 activations); the judge words a batch-size finding from it
KIND_FACTS = ("build_rank", "groups", "packages", "layers", "preload", "options", "activation_scales")
ACTIVATION_SCALES = ("dynamic", "static", None)




@dataclass(frozen=True, kw_only=True)
class ArtifactKind:
    """One row of the artifact table: every fact about a kind. The kind's module (imported only when
    the kind is built or loaded, so the table costs nothing to import) provides
    ``build(ctx, path, source) -> details``, which writes the file, and ``open_runner(path, ctx) ->
    Runner``, which reloads it from disk."""

    name: str
    suffix: str
    family: str  # the gate family (gates.GATE_FAMILIES) its rows are judged by
    module: str
    source: str | None  # the kind whose file this one is derived from
    runtime: str  # what loads it: "torch", "torch.export", "aoti", "onnxruntime", "openvino", "executorch"
    description: str
    build_rank: int
    groups: tuple[str, ...]
    packages: tuple[str, ...]
    layers: str | None
    preload: tuple[str, ...]
    options: tuple[str, ...]
    activation_scales: str | None
    # Calibrated on the golden set's calibration split (static int8): judged only on the other samples.
    calibrated: bool = False
    # The test module that holds its runner contract on a real model, where tests/integration/test_artifact_contract.py does
    # not build it (too slow on its tiny model, an environment of its own): always, or, for a runtime bound to systems
    # (runtimes.Runtime.systems), off those systems. None: the contract test builds it and holds it.
    contract: str | None = None

    def impl(self) -> ModuleType:
        return importlib.import_module(self.module)

    def filename(self) -> str:
        return f"{self.name}{self.suffix}"

    def build(self, ctx: BuildContext, path: Path, source: Path | None) -> dict[str, str]:
        return dict(self.impl().build(ctx, path, source) or {})

    def open_runner(self, path: Path, ctx: BuildContext) -> Runner:
        runner: Runner = self.impl().open_runner(path, ctx)
        return runner


def single_input(feeds: Mapping[str, np.ndarray]) -> np.ndarray:
    """The one array of ``feeds``; export-check feeds exactly one input until the golden set holds more."""
    if len(feeds) != 1:
        raise ArtifactError(f"got {len(feeds)} inputs ({', '.join(feeds)}); export-check feeds exactly one")
    return next(iter(feeds.values()))


def _array(value: Any) -> Any:  # a tensor as a numpy array; anything else as it is
    if hasattr(value, "detach"):
        return value.detach().cpu().numpy()
    return value


def named_outputs(out: object, what: str) -> dict[str, np.ndarray]:
    """A model's output as named arrays: a tensor is ``logits``; a tuple or list ``output_0``, ``output_1``, ..."""
    import numpy as np

    if isinstance(out, (tuple, list)) and len(out) >= 1:
        items = [_array(v) for v in out]
        if not isinstance(items[0], np.ndarray):
            raise ArtifactError(f"{what} returned {type(out[0]).__name__}; export-check compares one logits tensor")
        return {f"output_{i}": v for i, v in enumerate(items) if isinstance(v, np.ndarray)}
    value = _array(out)
    if not isinstance(value, np.ndarray):
        raise ArtifactError(f"{what} returned {type(out).__name__}; export-check compares one logits tensor")
    return {OUTPUT: value}


def output_arrays(out: object, what: str, bare: str = "output") -> dict[str, np.ndarray]:
    """Any output structure (tensor, tuple, list, dict, nestings) as ``{stable name: float or int array}``;
    a bare tensor is named ``bare``. Anything that is not a tensor or array is refused, naming it."""
    import numpy as np

    from ..signature import flatten_outputs

    try:
        flat = flatten_outputs(out)
    except ArtifactError as exc:
        raise ArtifactError(f"{what} {exc}") from None
    named: dict[str, np.ndarray] = {}
    for name, leaf in flat.items():
        value = _array(leaf)
        if not isinstance(value, np.ndarray):
            shown = name or "the output"
            raise ArtifactError(f"{what} returned {type(leaf).__name__} at {shown}; export-check compares tensors only "
                                "(return tensors, or tuples, lists and dicts of them)")
        named[name or bare] = value
    return named


def logits_of(outputs: Mapping[str, np.ndarray], what: str) -> np.ndarray:
    """The first output as a 2-D float32 array (one row per input), the array every row is judged on."""
    import numpy as np

    if not outputs:
        raise ArtifactError(f"{what} returned no output; export-check compares one logits tensor")
    out = np.asarray(next(iter(outputs.values())))
    if out.ndim == 1:
        out = out[:, None]
    if out.ndim != 2:
        out = out.reshape(out.shape[0], -1)
    return out.astype(np.float32, copy=False)
