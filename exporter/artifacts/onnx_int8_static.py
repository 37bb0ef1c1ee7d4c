"""onnx-int8-static: onnxruntime's ``quantize_static`` (QDQ, int8 weights and activations) of the ONNX
file, its activation ranges calibrated on the golden set's calibration split (``GoldenSet.calibration``).

Static quantization fixes every activation's range from the calibration data, so random inputs say
nothing about it (measured: MAE > 1 and 0% top-1 agreement on random inputs, 0.04 on golden digits);
the row is therefore judged only on the golden samples it was not calibrated on (``observe``).

Up to four recipes are built (``RECIPES``) and the first close enough to the float file *on the
calibration split* is shipped, else the closest (the judged samples play no part in the choice):
s8s8 over the whole graph, then with ``reduce_range`` (7-bit weights), then both on the compute ops
only (Conv, MatMul, Gemm). onnxruntime's x86 int8 kernels multiply u8 x s8 pairs with 16-bit
saturation on CPUs without VNNI (AVX2), and ``reduce_range``, onnxruntime's documented remedy, costs
precision where nothing saturates; quantizing every op (the attention mask's arithmetic) wrecks a
transformer that int8 matmuls alone do not. Measured on this AVX2 machine, worst output on the split:
the detector 15% as s8s8, 3.0% with reduce_range; the ResNet 2.1% as s8s8 (5.8% with it); the token
classifier 131% as s8s8, 2.3% on the compute ops with reduce_range. A recipe that onnxruntime cannot
quantize or run is skipped and named; the row is an error only when none works. The details name
the recipe shipped, every tried recipe's calibration error and the CPU's flags.

``quant_pre_process`` (shape inference and graph optimisation, which onnxruntime recommends before
quantizing) is tried first with symbolic shape inference, then without it (it fails on the legacy
exporter's ViT graph); when both fail the file is quantized without it and the details say so.

A source with external weights (past 2 GiB, artifacts/_external.py) is pre-processed and quantized with
onnxruntime's external-data options, each recipe's file under the artifact's own name in a folder of its
own, so the chosen one's ``.data`` file is moved into place, not copied.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import ArtifactError
from ..pinned import quiet_onnxruntime
from ..versions import cpu_flags
from ._calibration import calibration_batches, calibration_count
from ._common import OnnxRunner, atomic_path, require_dynamic_batch
from ._coverage import recorded
from ._external import place
from .base import BuildContext
from .parts import companions, data_name

ACCOUNTS = {"onnx-int8-static": "`onnxruntime.quantization.quantize_static` (QDQ; QInt8 activations and weights, per-channel, MinMax; over the "
                                "whole graph or the compute ops, with or without `reduce_range`: the first of four recipes close enough to the "
                                "float file on the calibration split) of the `onnx` file, calibrated on the golden set's **calibration split**, "
                                "`quant_pre_process` first; judged **only on the other samples** (see \"Static int8 and the calibration split\")",
            "onnx-dynamo-int8-static": "`quantize_static` QDQ of the `onnx-dynamo` file, calibrated on the split; needs onnxscript (`[modern]`)"}

# Pinned, recorded in details: what numbers the file gives depends on every one of them. Measured on the
# bundled ResNet (32 calibration digits, 32 judged): QInt8 activations, per-channel weights MAE 0.040;
# QUInt8 activations 0.59 (u8 x s8 saturates onnxruntime's x86 kernels; 0.10 with reduce_range), per-tensor 0.063.
SETTINGS = {"quant_format": "QDQ", "activation_type": "QInt8", "weight_type": "QInt8", "per_channel": "True",
            "calibrate_method": "MinMax"}


def _pre_process(source: Path, out: Path) -> tuple[Path, str]:
    """``quant_pre_process`` of ``source`` into ``out`` (its weights in ``out``'s one ``.data`` file when the
    source keeps them outside, artifacts/_external.py); the file to quantize and how it went, for the details."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    external = {"save_as_external_data": True, "all_tensors_to_one_file": True, "external_data_location": data_name(out.name)}
    failures = []
    for skip_symbolic in (False, True):
        try:
            quant_pre_process(str(source), str(out), skip_symbolic_shape=skip_symbolic, **(external if companions(source) else {}))
            return out, "quant_pre_process" + (" (skip_symbolic_shape=True)" if skip_symbolic else "")
        except Exception as exc:  # onnxruntime's shape inference raises many types; the next try or the fallback decides
            failures.append(f"{type(exc).__name__}: {' '.join(str(exc).split())[:120]}")
    return source, "none (quant_pre_process failed: " + "; ".join(failures) + ")"


class _Reader:
    """onnxruntime's CalibrationDataReader: the calibration batches, by the graph's input names."""

    def __init__(self, batches: tuple[dict[str, Any], ...]) -> None:
        self.batches = batches
        self._iter: Iterator[dict[str, Any]] | None = None

    def get_next(self) -> dict[str, Any] | None:
        import numpy as np

        if self._iter is None:
            self._iter = iter(self.batches)
        batch = next(self._iter, None)
        return None if batch is None else {k: np.ascontiguousarray(v) for k, v in batch.items()}

    def rewind(self) -> None:
        self._iter = None


COMPUTE_OPS = ["Conv", "MatMul", "Gemm"]
# Tried in this order (most of the graph in int8 first), name -> quantize_static keywords beyond SETTINGS;
# the first whose calibration error is at most GOOD_ENOUGH is shipped, else the closest of all.
RECIPES: dict[str, dict[str, Any]] = {
    "s8s8": {},
    "s8s8-reduce-range": {"reduce_range": True},
    "s8s8-compute-ops": {"op_types_to_quantize": COMPUTE_OPS},
    "s8s8-compute-ops-reduce-range": {"op_types_to_quantize": COMPUTE_OPS, "reduce_range": True},
}
GOOD_ENOUGH = 0.025  # half the int8 family's relative-MAE gate (5%): room for the judged samples to differ


def build(ctx: BuildContext, path: Path, source: Path | None) -> dict[str, str]:
    assert source is not None
    batches = calibration_batches(ctx, "onnx-int8-static")
    with tempfile.TemporaryDirectory(prefix="export-check-qdq-", dir=path.parent) as folder:
        pre, how = _pre_process(source, Path(folder) / "pre.onnx")
        external = bool(companions(source))
        reference = float_outputs(source, batches, ctx)
        errors: dict[str, float] = {}
        failed: dict[str, str] = {}
        for name, extra in RECIPES.items():
            (Path(folder) / name).mkdir()
            candidate = Path(folder) / name / path.name  # the artifact's name: its .data file is then ours (_external.place)
            try:
                _quantize(pre, candidate, batches, {**extra, "use_external_data_format": external})
                errors[name] = calibration_error(candidate, reference, batches, ctx)
            except Exception as exc:  # onnxruntime raises many types; the next recipe may still work
                failed[name] = str(exc) if isinstance(exc, ArtifactError) else f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
                continue
            if errors[name] <= GOOD_ENOUGH:
                break
        if not errors:
            raise ArtifactError("onnxruntime static quantization failed in every recipe: "
                                + "; ".join(f"{name}: {why}" for name, why in failed.items()))
        chosen = min(errors, key=lambda name: errors[name])
        with atomic_path(path) as tmp:
            placed = place(Path(folder) / chosen / path.name, tmp, path)
            require_dynamic_batch(tmp, "onnx static int8 quantization", ctx.signature)
    compared = ", ".join([*(f"{name} {value:.4g}" for name, value in errors.items()), *(f"{name} failed" for name in failed)])
    recipe = RECIPES[chosen]
    return {**SETTINGS, "reduce_range": str(bool(recipe.get("reduce_range", False))),
            "op_types_to_quantize": ",".join(recipe.get("op_types_to_quantize", ["all"])),
            "recipe": f"{chosen} (chosen on the calibration split; the worst output's relative MAE against the float file: {compared})",
            **({"recipes_failed": "; ".join(f"{name}: {why}" for name, why in failed.items())} if failed else {}),
            "cpu_flags": cpu_flags() or "unknown", "pre_process": how, "calibration_samples": str(calibration_count(batches, ctx)),
            **recorded(path), **placed}


def _quantize(pre: Path, out: Path, batches: tuple[dict[str, Any], ...], extra: dict[str, Any]) -> None:
    quiet_onnxruntime()  # the sessions the quantizer opens log at fatal only
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    try:
        quantize_static(str(pre), str(out), _Reader(batches), quant_format=QuantFormat.QDQ,
                        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8, per_channel=True,
                        calibrate_method=CalibrationMethod.MinMax, **extra)
    except Exception as exc:
        raise ArtifactError(f"onnxruntime quantize_static failed: {type(exc).__name__}: {' '.join(str(exc).split())[:400]}") from None


def float_outputs(source: Path, batches: tuple[dict[str, Any], ...], ctx: BuildContext) -> list[dict[str, Any]]:
    """The float file's outputs on every calibration batch, run as the row runs it: computed once, compared with each recipe."""
    try:
        with OnnxRunner(source, ctx.threads, ctx.signature) as reference:
            return [reference.infer(batch) for batch in batches]
    except ArtifactError:
        raise
    except Exception as exc:  # onnxruntime raises its own Fail/InvalidArgument types
        sizes = sorted({calibration_count((batch,), ctx) for batch in batches})
        raise ArtifactError(f"the float ONNX file {source.name} fails on the calibration batches ({', '.join(map(str, sizes))} samples), "
                            f"so nothing can be calibrated: {type(exc).__name__}: {' '.join(str(exc).split())[:400]}") from None


def calibration_error(candidate: Path, reference: list[dict[str, Any]], batches: tuple[dict[str, Any], ...], ctx: BuildContext) -> float:
    """The worst float output's relative MAE (sum |quantized - float| / sum |float|, over the calibration
    batches), as the int8 gate judges every output; ``reference``: ``float_outputs`` of the same batches."""
    import numpy as np

    diff: dict[str, float] = {}
    size: dict[str, float] = {}
    with OnnxRunner(candidate, ctx.threads, ctx.signature) as quantized:
        for batch, want in zip(batches, reference, strict=True):
            got = quantized.infer(batch)
            for name, ref in want.items():
                if np.issubdtype(ref.dtype, np.floating):
                    diff[name] = diff.get(name, 0.0) + float(np.abs(got[name].astype(np.float64) - ref).sum())
                    size[name] = size.get(name, 0.0) + float(np.abs(ref.astype(np.float64)).sum())
    return max((diff[name] / (size[name] or 1.0) for name in diff), default=0.0)


def open_runner(path: Path, ctx: BuildContext) -> OnnxRunner:
    return OnnxRunner(path, ctx.threads, ctx.signature)
