"""litert: the model as a LiteRT (formerly TensorFlow Lite) flatbuffer, Google's runtime for Android,
embedded Linux and microcontrollers. ``litert_torch.convert(model, example)`` (``litert-torch``, formerly
``ai-edge-torch``: ``torch.export`` lowered through StableHLO to the LiteRT converter), ``export`` to one
``.tflite``; reloaded from the file by the LiteRT interpreter (``ai_edge_litert.interpreter``) with
``num_threads`` pinned to ``--threads`` and run through its signature (``serving_default``: inputs
``args_0``..., outputs ``output_0``...). The batch is static in the file (the example's); the signature
runner resizes the inputs to each batch it is fed, and a model that cannot take another batch size fails
that size in the batch-size check, with the interpreter's words. litert-torch converts int64 inputs to
int32 (``enable_x64=False``): the runner feeds each input in the file's type (a value that type cannot
hold is that batch's error).

Shape buckets. A declared dynamic axis (not the batch) that the file keeps at the example's size (the
interpreter refuses to resize it: a reshape baked into the graph, or a recurrent layer that torch.export
unrolls over the example's time steps, pytorch/pytorch#115092) is what an on-device engineer handles with
one signature per shape bucket: the file is converted again with one signature per distinct size of those
axes in the golden set (``litert_torch.signature(name, model, sample).signature(...).convert()``; named
``len_40``, ``len_48``...; the sample of each is the example cut or tiled to that size), and the runner
runs each batch through the signature whose static shape it matches (a size with no signature is that
batch's error, naming the sizes the file takes). At most ``MAX_SIGNATURES`` distinct sizes: above, the row
is not applicable (fewer lengths, or samples padded to a few bucket lengths). A model with an ``nn.LSTM``
(or GRU, RNN) and a declared axis goes straight to buckets, each converted from one sample and fed sample
by sample (a batch larger than one fails to resize in XNNPack once the recurrence is unrolled).

The runtime packages pull jax and transformers, and ``xdsl`` pins typing-extensions below 4.13, which
the ``coremltools`` of the ExecuTorch stack refuses: LiteRT cannot share an environment with the
``executorch`` and ``coreml`` kinds. It has a tox environment of its own (``tox -e litert``, run by
``./dev test``; pins in ``constraints-litert.txt``). Install: ``pip install litert-torch ai-edge-litert``.
"""

from __future__ import annotations

import copy
import io
import warnings
from collections.abc import Mapping
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ArtifactError
from ._common import atomic_path
from ._recurrent import recurrent_types
from .base import BuildContext, NotApplicable, listed_outputs, positional_inputs

ACCOUNTS = {"litert": "a LiteRT (formerly TensorFlow Lite) flatbuffer: `litert_torch.convert(model, example)` then `export` (litert-torch 0.10: "
                      "`torch.export` lowered through StableHLO); reloaded by the LiteRT interpreter (`ai_edge_litert.interpreter`, "
                      "`num_threads` = `--threads`) and run through its `serving_default` signature. The batch in the file is the example's; the "
                      "signature runner resizes it to each batch fed, and a size the model cannot take is that size's error. A declared dynamic "
                      "axis the file keeps at the example's size (a reshape baked into the graph; an LSTM, which `torch.export` unrolls over the "
                      "example's time steps) gets **one signature per shape bucket**: the file is converted with one signature per distinct size "
                      "of that axis in the golden set (`len_40`, `len_48`, ...: `signatures` in the details says which sizes it takes, "
                      "`signatures_why` why), and the runner runs each batch through the signature its shape matches; a size with no signature "
                      "is that batch's error, naming the sizes the file takes. Above 16 distinct sizes (`litert.MAX_SIGNATURES`) the row is "
                      "**not applicable**: record fewer lengths, or pad the samples to a few bucket lengths. int64 inputs are fed as the int32 "
                      "litert-torch converts them to. Its stack cannot share an environment with `executorch`/`coreml` (xdsl pins "
                      "typing-extensions below 4.13, coremltools needs 4.14+): its tests run in `tox -e litert` (pins in "
                      "`constraints-litert.txt`); without it the kind is **not applicable**, naming the packages"}

INSTALL = ("pip install litert-torch ai-edge-litert, in an environment without coremltools (xdsl, which litert-torch pulls, pins "
           "typing-extensions below 4.13; coremltools' cattrs needs 4.14): tox -e litert")
SIGNATURE = "serving_default"
MAX_SIGNATURES = 16  # the most shape buckets (distinct sizes of the pinned axes in the golden set) one file is converted with
BUCKET = "len_"  # a bucket signature's name: len_40 (every pinned axis at 40), len_40_56 (sizes differ between the axes)


def _version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "?"


def require_converter() -> Any:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import litert_torch
    except ImportError:
        raise NotApplicable(f"not applicable: litert-torch is not installed: {INSTALL}") from None
    return litert_torch


def require_interpreter() -> Any:
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        raise NotApplicable(f"not applicable: ai-edge-litert (the LiteRT interpreter) is not installed: {INSTALL}") from None
    return Interpreter


def _convert(converter: Any, model: Any, signatures: list[tuple[str, tuple[Any, ...], dict[str, Any]]], path: Path) -> None:
    """One ``.tflite`` at ``path`` with these (name, args, kwargs) signatures: ``serving_default`` alone through
    ``litert_torch.convert``, buckets through ``litert_torch.signature(...).signature(...).convert()``."""
    said = io.StringIO()
    try:
        with redirect_stdout(said), redirect_stderr(said):  # its progress lines: kept out of the terminal
            if [name for name, _, _ in signatures] == [SIGNATURE]:
                _, args, kwargs = signatures[0]
                edge = converter.convert(model, tuple(args), sample_kwargs=kwargs or None)
            else:
                chain = converter
                for name, args, kwargs in signatures:
                    chain = chain.signature(name, model, tuple(args), kwargs or None)
                edge = chain.convert()
            with atomic_path(path) as partial:
                edge.export(str(partial))
    except NotApplicable:
        raise
    except Exception as exc:
        raise ArtifactError(f"litert_torch.convert failed: {type(exc).__name__}: {' '.join(str(exc).split())[:600]}") from None


def _index(name: str) -> int:  # args_0, args_1, ... output_0, ...: ordered by their index, not by the name's text
    tail = name.rpartition("_")[2]
    return int(tail) if tail.isdigit() else 0


def _typed(array: np.ndarray, dtype: Any, what: str) -> np.ndarray:
    """``array`` in the type the file declares for it: litert-torch converts int64 inputs to int32 (``enable_x64=False``)."""
    array = np.ascontiguousarray(array)
    dtype = np.dtype(dtype)
    if array.dtype == dtype or array.dtype.kind != dtype.kind:
        return array
    cast = array.astype(dtype)
    if dtype.kind in "iu" and not np.array_equal(cast, array):
        raise ArtifactError(f"litert: {what} holds values that {dtype} (the file's type for it: litert-torch converts int64 to "
                            "int32) cannot hold")
    return cast


def _refusal(path: Path, feeds: list[Any], signature: str = SIGNATURE) -> str | None:
    """The interpreter's words when the file, resized to these inputs (the signature's order), cannot run them; None: it runs."""
    runner = require_interpreter()(model_path=str(path), num_threads=1).get_signature_runner(signature)
    details = runner.get_input_details()
    names = sorted(details, key=_index)
    try:
        runner(**{name: _typed(f.numpy(), details[name]["dtype"], name) for name, f in zip(names, feeds, strict=True)})
    except (RuntimeError, ValueError) as exc:
        return " ".join(str(exc).split())[:300]
    return None


def _sized(tensor: Any, axis: int, size: int) -> Any:
    """``tensor`` cut, or tiled then cut, to ``size`` on ``axis``: a sample of that shape for tracing a bucket's signature."""
    import torch

    have = int(tensor.shape[axis])
    if size > have:
        tensor = torch.cat([tensor] * -(-size // have), dim=axis)
    return tensor.narrow(axis, 0, size).contiguous()


def bucket_name(combo: tuple[tuple[str, int, int], ...]) -> str:
    sizes = [size for _, _, size in combo]
    return BUCKET + (str(sizes[0]) if len(set(sizes)) == 1 else "_".join(map(str, sizes)))


def _bucketed(ctx: BuildContext, converter: Any, model: Any, path: Path, tensors: list[Any], positional: int, why: str) -> dict[str, str]:
    """The file again with one signature per distinct combination of the declared axes' sizes in the golden set, each
    traced from ``tensors`` (the example, or its first sample) cut or tiled to that size. NotApplicable above MAX_SIGNATURES."""
    specs = _specs(ctx)
    declared = [(spec.name, axis) for spec in specs for axis, _ in spec.dynamic_axes if axis != spec.batch_axis]
    known = [{(name, axis): size for name, axis, size in combo} for combo in ctx.axis_sizes]
    combos = [tuple((name, axis, sizes[(name, axis)]) for name, axis in declared) for sizes in known if set(sizes) == set(declared)]
    if not combos:  # built outside a run (no golden sizes): the example's own
        combos = [tuple((spec.name, axis, int(t.shape[axis])) for spec, t in zip(specs, tensors, strict=True)
                        for axis, _ in spec.dynamic_axes if axis != spec.batch_axis)]
    axes = " and ".join(f"{name} axis {axis}" for name, axis in declared)
    if len(combos) > MAX_SIGNATURES:
        raise NotApplicable(f"not applicable: {why}; one signature per size would take {len(combos)} (the golden set's distinct "
                            f"sizes of {axes}), above the {MAX_SIGNATURES} a file is given (litert.MAX_SIGNATURES): record the "
                            "golden set with fewer lengths, or pad its samples to a few bucket lengths")
    signatures = []
    for combo in combos:
        sized = list(tensors)
        for name, axis, size in combo:
            k = next(i for i, spec in enumerate(specs) if spec.name == name)
            sized[k] = _sized(sized[k], axis, size)
        signatures.append((bucket_name(combo), tuple(sized[:positional]), dict(zip(ctx.example_args()[1], sized[positional:], strict=True))))
    _convert(converter, model, signatures, path)
    interpreter = require_interpreter()(model_path=str(path))
    found = interpreter.get_signature_list()
    missing = [name for name, _, _ in signatures if name not in found]
    if missing:
        raise ArtifactError(f"{path.name} lacks the signatures {', '.join(missing)} it was converted with")
    first = found[signatures[0][0]]
    sizes = ", ".join(bucket_name(c)[len(BUCKET):].replace("_", "/") for c in combos)
    batch = [int(d["shape"][0]) if len(d["shape"]) else 0 for d in interpreter.get_signature_runner(signatures[0][0]).get_input_details().values()]
    return {"litert_inputs": ",".join(first["inputs"]), "litert_outputs": ",".join(first["outputs"]),
            "signatures": f"{axes} at {sizes}: one signature each ({', '.join(name for name, _, _ in signatures)})",
            "signatures_why": why, "batch_in_file": ",".join(map(str, batch))}


def _specs(ctx: BuildContext) -> list[Any]:
    return [i for i in ctx.signature.inputs if not i.keyword] + [i for i in ctx.signature.inputs if i.keyword]


def build(ctx: BuildContext, path: Path, source: Path | None) -> dict[str, str]:
    """The file at the example's batch; when the interpreter cannot resize that file to one sample (a shape baked into
    the graph: litert-torch 0.10 cannot lower a flatten over a symbolic batch), it is converted again from one sample
    and the runner feeds it sample by sample. A declared dynamic axis the file keeps at the example's size gets one
    signature per size in the golden set (``_bucketed``)."""
    converter = require_converter()
    model = copy.deepcopy(ctx.model).eval()
    args, kwargs = ctx.example_args()
    specs = _specs(ctx)
    example = [*args, *kwargs.values()]
    batch_axes = [s.batch_axis for s in specs] if len(specs) == len(example) else [0] * len(example)
    declared = [(k, axis) for k, spec in enumerate(specs) for axis, _ in spec.dynamic_axes
                if axis != spec.batch_axis] if len(specs) == len(example) else []
    example_batch = int(example[0].shape[batch_axes[0]])
    one = [t.narrow(axis, 0, 1) for t, axis in zip(example, batch_axes, strict=True)]
    versions = {"litert_torch": _version("litert-torch"), "ai_edge_litert": _version("ai-edge-litert")}
    recurrent = recurrent_types(model)
    if declared and recurrent:  # torch.export unrolls the recurrence over the example's time steps: buckets, from one sample
        kept = ", ".join(f"{specs[k].name} axis {axis} at {int(example[k].shape[axis])}" for k, axis in declared)
        why = (f"a .tflite converted from the example would keep its {kept}: litert-torch lowers through torch.export, which "
               f"unrolls the {'/'.join(sorted(recurrent))} over the example's time steps (pytorch/pytorch#115092)")
        details = _bucketed(ctx, converter, model, path, one, len(args), why)
        details["batch_in_file"] += " (fed sample by sample: each signature is converted from one sample, its recurrence unrolled)"
        return {**details, **versions}
    _convert(converter, model, [(SIGNATURE, args, kwargs)], path)
    refused = _refusal(path, one) if example_batch > 1 else None
    if declared:
        wider = list(example)
        for k, axis in declared:
            wider[k] = torch_cat_twice(wider[k], axis)
        said = _refusal(path, wider)
        if said is not None:
            kept = ", ".join(f"{specs[k].name} axis {axis} at {int(example[k].shape[axis])}" for k, axis in declared)
            doubled = ", ".join(str(2 * int(example[k].shape[axis])) for k, axis in declared)
            why = f"the .tflite keeps the example's {kept}, and the interpreter refuses {doubled}: {said}"
            details = _bucketed(ctx, converter, model, path, example if refused is None else one, len(args), why)
            details["batch_in_file"] += (" (resized to each batch fed)" if refused is None else
                                         f" (fed sample by sample: the batch-{example_batch} file refused to resize to one sample: {refused})")
            return {**details, **versions}
    batch_note = f"{example_batch} (resized to each batch fed)"
    if refused is not None:
        args = tuple(one[:len(args)])
        kwargs = dict(zip(kwargs, one[len(args):], strict=True))
        _convert(converter, model, [(SIGNATURE, args, kwargs)], path)
        batch_note = (f"1 (fed sample by sample: the batch-{example_batch} file refused to resize to one sample: {refused})")
    interpreter = require_interpreter()(model_path=str(path))
    signature = interpreter.get_signature_list().get(SIGNATURE)
    if signature is None:
        raise ArtifactError(f"{path.name} has no {SIGNATURE} signature")
    batch = [int(d["shape"][0]) if len(d["shape"]) else 0 for d in interpreter.get_input_details()]
    return {"litert_inputs": ",".join(signature["inputs"]), "litert_outputs": ",".join(signature["outputs"]),
            "batch_in_file": ",".join(map(str, batch)) + " " + batch_note.partition(" ")[2], **versions}


def torch_cat_twice(tensor: Any, axis: int) -> Any:
    import torch

    return torch.cat([tensor, tensor], dim=axis)


@dataclass
class _Signature:
    """One signature of the file: its runner, inputs in the model's order with their static shapes and types, and whether
    it holds one sample (fed sample by sample)."""

    name: str
    runner: Any
    inputs: list[str]
    shapes: list[tuple[int, ...]]
    dtypes: list[Any]
    one_sample: bool


class LiteRTRunner:
    """The ``.tflite`` loaded by the LiteRT interpreter, run through its signature: ``serving_default`` (resized to each
    batch fed), or the bucket signature whose static shape the batch matches."""

    def __init__(self, path: Path, ctx: BuildContext) -> None:
        self.path, self.ctx = path, ctx
        self.signatures: list[_Signature] = []

    def __enter__(self) -> LiteRTRunner:
        interpreter = require_interpreter()(model_path=str(self.path), num_threads=self.ctx.threads)
        listed = interpreter.get_signature_list()
        names = [SIGNATURE] if SIGNATURE in listed else sorted(n for n in listed if n.startswith(BUCKET))
        if not names:
            raise ArtifactError(f"{self.path.name} has no {SIGNATURE} signature nor {BUCKET}* signatures (it has: {', '.join(listed) or 'none'})")
        for name in names:
            runner = interpreter.get_signature_runner(name)
            details = runner.get_input_details()
            inputs = sorted(details, key=_index)
            shapes = [tuple(int(d) for d in details[i]["shape"]) for i in inputs]
            self.signatures.append(_Signature(name, runner, inputs, shapes, [details[i]["dtype"] for i in inputs],
                                              bool(shapes) and all(len(s) and s[0] == 1 for s in shapes)))
        return self

    def __exit__(self, *exc: object) -> None:
        self.signatures = []

    def _batch_axes(self, count: int) -> list[int]:
        specs = _specs(self.ctx)
        return [s.batch_axis for s in specs] if len(specs) == count else [0] * count

    def _input_names(self, count: int) -> list[str]:
        specs = _specs(self.ctx)
        return [s.name for s in specs] if len(specs) == count else [f"input {k}" for k in range(count)]

    def _signature_for(self, arrays: list[np.ndarray]) -> _Signature:
        """``serving_default``; with buckets, the one whose static shape (but the batch) the batch matches."""
        if len(self.signatures) == 1 and self.signatures[0].name == SIGNATURE:
            return self.signatures[0]
        axes = self._batch_axes(len(arrays))

        def fits(sig: _Signature) -> bool:
            return all(a.ndim == len(shape) and all(d == axis or a.shape[d] == shape[d] for d in range(a.ndim))
                       for a, shape, axis in zip(arrays, sig.shapes, axes, strict=True))

        for sig in self.signatures:
            if fits(sig):
                return sig
        names = self._input_names(len(arrays))
        varying = [(k, d) for k, shape in enumerate(self.signatures[0].shapes) for d in range(len(shape))
                   if d != axes[k] and len({s.shapes[k][d] if d < len(s.shapes[k]) else -1 for s in self.signatures}) > 1]
        takes = ", ".join(sorted({"/".join(str(s.shapes[k][d]) for k, d in varying) for s in self.signatures},
                                 key=lambda t: [int(v) for v in t.split("/")]))
        fed = "/".join(str(arrays[k].shape[d]) if d < arrays[k].ndim else "-" for k, d in varying)
        where = " and ".join(f"{names[k]} axis {d}" for k, d in varying)
        shapes = "; ".join(f"{names[k]} {tuple(a.shape)}" for k, a in enumerate(arrays))
        raise ArtifactError(f"litert: {self.path.name} has no signature for {where} at {fed} ({shapes}): it takes {where} at "
                            f"{takes} only, one signature each (the golden set's sizes when it was built); pad the batch to one of "
                            "them, or record that size in the golden set and build again")

    def infer(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        assert self.signatures, "runner used outside its with-block"
        arrays = positional_inputs(feeds, self.ctx.signature)
        if len(arrays) != len(self.signatures[0].inputs):
            raise ArtifactError(f"{self.path.name} takes {len(self.signatures[0].inputs)} inputs; got {len(arrays)}")
        sig = self._signature_for(arrays)
        axes = self._batch_axes(len(arrays))
        count = int(arrays[0].shape[axes[0]]) if arrays[0].ndim > axes[0] else 1
        if sig.one_sample and count > 1:  # a file of one sample (build: the interpreter could not resize it), fed sample by sample
            parts = [self._run(sig, [np.take(a, [i], axis=axis) for a, axis in zip(arrays, axes, strict=True)]) for i in range(count)]
            outs = [o.batch_axis for o in self.ctx.signature.outputs]
            outs = outs if len(outs) == len(parts[0]) else [0] * len(parts[0])
            return listed_outputs([np.concatenate([p[k] for p in parts], axis=outs[k]) for k in range(len(parts[0]))], self.ctx.signature)
        return listed_outputs(self._run(sig, arrays), self.ctx.signature)

    def _run(self, sig: _Signature, arrays: list[np.ndarray]) -> list[np.ndarray]:
        names = self._input_names(len(arrays))
        try:
            out = sig.runner(**{name: _typed(a, dtype, names[k])
                                for k, (name, a, dtype) in enumerate(zip(sig.inputs, arrays, sig.dtypes, strict=True))})
        except (RuntimeError, ValueError) as exc:
            raise ArtifactError(f"litert: {' '.join(str(exc).split())[:300]}") from None
        return [np.array(out[k]) for k in sorted(out, key=_index)]


def open_runner(path: Path, ctx: BuildContext) -> LiteRTRunner:
    return LiteRTRunner(path, ctx)
