"""openvino-f32: the OpenVINO model with f32 weights and ``INFERENCE_PRECISION_HINT=f32`` pinned, beside
``openvino`` as deployed (:mod:`.openvino_ir`): what the model gives when the runtime's defaults are undone."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from .base import BuildContext
from .openvino_ir import OpenVinoRunner, build_ir, target_details

ACCOUNTS = {"openvino-f32": "the same model with f32 weights and `INFERENCE_PRECISION_HINT=f32` pinned, so the drift the deployed defaults add "
                            "on this machine is visible beside it"}


def build(ctx: BuildContext, path: Path, source: Path | None) -> dict[str, str]:
    return build_ir(ctx, path, f32=True)


def open_runner(path: Path, ctx: BuildContext) -> OpenVinoRunner:
    return OpenVinoRunner(path, ctx, f32=True)


def replay_details(built: Mapping[str, str]) -> dict[str, str]:
    return target_details(built, f32=True)
