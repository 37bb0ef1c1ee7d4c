"""openvino: the model converted by OpenVINO (``openvino.convert_model``) and saved as deployed,
``save_model``'s default fp16-compressed weights, compiled for the CPU at the runtime's default
inference precision (bf16 on a CPU with avx512_bf16 or AMX, f32 on one without). ``openvino-f32``
(:mod:`.openvino_f32`) is the same model with f32 weights and f32 precision pinned, so the drift the
deployed defaults add on this machine, and the CPU flags that decide it, are visible side by side.

The IR is an ``.xml`` and a ``.bin``; the artifact is one uncompressed tar of both, read back from
memory (``Core.read_model(xml, weights)``), so that it is written atomically and cached as one file.
An optional extra: ``pip install "export-check[openvino]"``.
"""

from __future__ import annotations

import tarfile
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..versions import BELOW_BF16, PRECISION_FLAGS, cpu_flags, onednn_cap_below
from ._common import atomic_path
from .base import BuildContext, NotApplicable, listed_outputs, positional_inputs

ACCOUNTS = {"openvino": "OpenVINO as deployed: `openvino.convert_model`, `save_model` with its default fp16-compressed weights, compiled for the "
                        "CPU at the runtime's default inference precision (bf16 on a CPU with `avx512_bf16`/AMX); the CPU's precision-relevant "
                        "`/proc/cpuinfo` flags and the precision chosen are recorded in the row's details. The IR's `.xml` and `.bin` in one "
                        "tar. Computed in bf16 (on such a CPU), the row is judged by the `bf16` gate: relative MAE ≤ 2% **and** top-1 agreement "
                        "≥ 98% ([What varies by CPU](what-varies-by-cpu.md))"}

INSTALL = 'pip install "export-check[openvino]" (or pip install openvino)'
# /proc/cpuinfo flags that decide the precision OpenVINO's CPU plugin picks (bf16 with avx512_bf16 or
# AMX, fp16 with avx512_fp16 on recent Xeons) or how fast int8/f32 runs.
XML, BIN = "model.xml", "model.bin"


def openvino() -> Any:
    try:
        import openvino as ov
    except ImportError:
        raise NotApplicable(f"not applicable: openvino is not installed: {INSTALL}") from None
    return ov


def bf16_capped() -> str | None:
    """The oneDNN cap that rules out bf16 kernels (``"ONEDNN_MAX_CPU_ISA=AVX2"``), or None. OpenVINO picks its
    default precision from the CPU's own flags, not from the cap: capped below bf16 on a bf16 CPU it compiles
    bf16 nodes oneDNN then cannot run ("Convolution node ... is not initialized"). A CPU of the capped kind
    has no bf16, so its default is f32: under such a cap the row pins f32, as that CPU would."""
    return onednn_cap_below(BELOW_BF16)


def compile_config(threads: int, f32: bool) -> dict[str, Any]:
    config: dict[str, Any] = {"INFERENCE_NUM_THREADS": threads, "NUM_STREAMS": 1, "PERFORMANCE_HINT": "LATENCY"}
    if f32 or bf16_capped():
        config["INFERENCE_PRECISION_HINT"] = "f32"
    return config


def precision_hint(f32: bool) -> str:
    if f32:
        return "f32 (pinned)"
    cap = bf16_capped()
    if cap:
        return f"f32: {cap} caps oneDNN below bf16, as on a CPU without avx512_bf16"
    return "runtime default: bf16 on a CPU with avx512_bf16 or amx_bf16, else f32"


def build_ir(ctx: BuildContext, path: Path, f32: bool) -> dict[str, str]:
    ov = openvino()
    args, kwargs = ctx.example_args()
    example: Any = args[0] if len(args) == 1 and not kwargs else {**dict(zip(_positional(ctx), args, strict=True)), **kwargs}
    converted = ov.convert_model(ctx.model, example_input=example)
    with tempfile.TemporaryDirectory() as folder:
        ov.save_model(converted, str(Path(folder) / XML), compress_to_fp16=not f32)
        with atomic_path(path) as tmp, tarfile.open(tmp, "w") as tar:
            for name in (XML, BIN):
                tar.add(Path(folder) / name, arcname=name)
    compiled = ov.Core().compile_model(read_ir(path), "CPU", compile_config(ctx.threads, f32))
    return {"weights": "f32" if f32 else "fp16 (save_model default compress_to_fp16)",
            "inference_precision": _type_name(compiled.get_property("INFERENCE_PRECISION_HINT")),
            # the precision, and so the gate family (gates.precision_family), is the CPU's choice here
            "precision_hint": precision_hint(f32),
            "cpu_flags": cpu_flags() or "(none of " + ", ".join(PRECISION_FLAGS) + ")",
            "openvino": str(ov.__version__)}


def plugin_precision() -> str:
    """The inference precision this machine's OpenVINO CPU plugin reports as its default (``INFERENCE_PRECISION_HINT``:
    "bf16" on a CPU with avx512_bf16 or AMX, "f32" on one without, "f16" on ARM): what a model compiled for the CPU
    without a hint computes in here. A test monkeypatches it in the replay's process to play a target of another CPU."""
    return _type_name(openvino().Core().get_property("CPU", "INFERENCE_PRECISION_HINT"))


def target_details(built: Mapping[str, str], f32: bool) -> dict[str, str]:
    """The precision-dependent details a replay decides on the target, never copied from the build (``built``): the
    precision its OpenVINO computes in here (pinned f32, f32 under a cap below bf16, else the CPU plugin's own default),
    the hint that decided it, its OpenVINO version; the build's precision kept beside as ``build_inference_precision``.
    The row's gate family follows (gates.precision_family), and the CPU flags are the target's (observe)."""
    ov = openvino()
    precision = "f32" if f32 or bf16_capped() else plugin_precision()
    hint = precision_hint(f32) if f32 or bf16_capped() else (
        f"runtime default on the target: its openvino's CPU plugin reports INFERENCE_PRECISION_HINT={precision}")
    found = {"inference_precision": precision, "precision_hint": hint, "openvino": str(ov.__version__)}
    if "inference_precision" in built:
        found["build_inference_precision"] = str(built["inference_precision"])
    return found


def _type_name(value: Any) -> str:  # an openvino Type as OpenVINO spells it: "f32", "bf16"
    name = getattr(value, "get_type_name", None)
    return str(name()) if callable(name) else str(value)


def _positional(ctx: BuildContext) -> list[str]:
    return [i.name for i in ctx.signature.inputs if not i.keyword]


def read_ir(path: Path) -> Any:
    """The OpenVINO model held in the artifact's tar, read from memory."""
    ov = openvino()
    with tarfile.open(path, "r") as tar:
        members = {m.name: tar.extractfile(m) for m in tar.getmembers()}
        xml, weights = (members[n].read() if members.get(n) else b"" for n in (XML, BIN))  # type: ignore[union-attr]
    return ov.Core().read_model(model=xml.decode("utf-8"), weights=ov.Tensor(np.frombuffer(weights, np.uint8).copy()))


class OpenVinoRunner:
    """The IR compiled for the CPU with pinned threads (and, for ``openvino-f32``, f32 precision)."""

    def __init__(self, path: Path, ctx: BuildContext, f32: bool) -> None:
        self.path, self.ctx, self.f32 = path, ctx, f32
        self.compiled: Any = None

    def __enter__(self) -> OpenVinoRunner:
        ov = openvino()
        self.compiled = ov.Core().compile_model(read_ir(self.path), "CPU", compile_config(self.ctx.threads, self.f32))
        return self

    def __exit__(self, *exc: object) -> None:
        self.compiled = None

    def infer(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        assert self.compiled is not None, "runner used outside its with-block"
        signature = self.ctx.signature
        inputs = positional_inputs(feeds, signature)
        result = self.compiled([np.ascontiguousarray(a) for a in inputs])
        values = [np.asarray(result[port]) for port in self.compiled.outputs]
        return listed_outputs(values, signature)


def build(ctx: BuildContext, path: Path, source: Path | None) -> dict[str, str]:
    return build_ir(ctx, path, f32=False)


def open_runner(path: Path, ctx: BuildContext) -> OpenVinoRunner:
    return OpenVinoRunner(path, ctx, f32=False)


def replay_details(built: Mapping[str, str]) -> dict[str, str]:
    return target_details(built, f32=False)
