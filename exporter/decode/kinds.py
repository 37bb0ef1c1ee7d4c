"""The artifacts of a language model: one row per kind, each written to a file and stepped from it.

``full-forward`` is the single forward (``torch.export``, the sequence axis dynamic); every other kind
is the decode step of :mod:`.steps` with its static KV cache, in the forms people ship. A kind's
``build`` writes its file atomically; :mod:`.stepping` drives the file in its runtime.

Weight-only int8 (torchao ``Int8WeightOnlyConfig``) quantizes ``nn.Linear`` weights: every projection
of the Llama layout, only the (tied) output head of GPT-2, whose projections are ``Conv1D``.

Weight-only int4 is torchao's ``IntxWeightOnlyConfig(weight_dtype=torch.int4)``, groups of
``INT4_GROUP_SIZE`` along each row, on the same layers: the int4 form that builds and runs on a CPU.
``Int4WeightOnlyConfig`` (torchao 0.18) does not here: its plain and preshuffled packings import the
CUDA kernels of ``mslk``, ``plain_int32`` "does not support device 'cpu' yet", ``tile_packed_to_4d``
needs bfloat16 and an NVIDIA driver, and the CPU layout of its version 1 is gone.
"""

from __future__ import annotations

import copy
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .gates import INT4_GROUP_SIZE
from .steps import INPUTS, OUTPUTS, BufferedCacheStep, CachedStep, FullForward, empty_cache

FLOAT, INT8_WEIGHT, INT4_WEIGHT = "float", "int8-weight", "int4-weight"


@dataclass(frozen=True)
class DecodeKind:
    name: str
    family: str  # the gate family: float (generations identical) or int8-weight (KL and agreement bounds)
    suffix: str
    runtime: str  # the stepper's runtime (stepper.py)
    build: Callable[[Any, int, Path, dict], None]  # (model, cache length, file, planted bugs)
    needs: tuple[str, ...] = ()  # modules the build and the runtime import: absent -> not applicable
    stepper_extra: str = ""  # what the stepper imports besides the runtime


def _example(step: CachedStep) -> tuple[torch.Tensor, ...]:
    key, value = empty_cache(step.model, step.cache_length)
    return torch.tensor([0]), torch.tensor([0]), key, value


def _written(path: Path, write: Callable[[str], None]) -> None:
    """``write(temporary)`` beside ``path``, then renamed over it: a killed build leaves no half file."""
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=path.suffix, dir=path.parent)
    os.close(fd)
    try:
        write(temporary)
        with open(temporary, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


def build_full_forward(model: Any, cache_length: int, path: Path, bugs: dict) -> None:
    tokens = torch.export.Dim("tokens", min=2, max=int(model.config.max_position_embeddings))
    with torch.no_grad():
        program = torch.export.export(FullForward(model).eval(), (torch.zeros(1, 4, dtype=torch.long),),
                                      dynamic_shapes=({1: tokens},))
    _written(path, lambda name: torch.export.save(program, name))


def _step_program(model: Any, cache_length: int, bugs: dict) -> torch.export.ExportedProgram:
    step = CachedStep(model, cache_length, **bugs).eval()
    with torch.no_grad():
        return torch.export.export(step, _example(step))


def build_torch_export(model: Any, cache_length: int, path: Path, bugs: dict) -> None:
    program = _step_program(model, cache_length, bugs)
    _written(path, lambda name: torch.export.save(program, name))


def build_onnx(model: Any, cache_length: int, path: Path, bugs: dict) -> None:
    step = CachedStep(model, cache_length, **bugs).eval()

    def write(name: str) -> None:
        with torch.no_grad():
            torch.onnx.export(step, _example(step), name, input_names=list(INPUTS), output_names=list(OUTPUTS),
                              opset_version=17, dynamo=False)
    _written(path, write)


def build_executorch(model: Any, cache_length: int, path: Path, bugs: dict) -> None:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    program = to_edge_transform_and_lower(_step_program(model, cache_length, bugs), partitioner=[XnnpackPartitioner()])
    buffer = program.to_executorch().buffer
    _written(path, lambda name: None if Path(name).write_bytes(buffer) else None)


def build_executorch_runner(model: Any, cache_length: int, path: Path, bugs: dict) -> None:
    """The .pte ExecuTorch's ``TextLLMRunner`` runs: the cache inside, and the metadata methods the runner reads."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    step = BufferedCacheStep(model, cache_length, **bugs).eval()
    with torch.no_grad():
        program = torch.export.export(step, (torch.tensor([[0]]), torch.tensor([0])))
    config = model.config
    eos = config.eos_token_id if isinstance(config.eos_token_id, int) else 0
    metadata = {"get_max_seq_len": cache_length, "get_max_context_len": cache_length, "get_vocab_size": int(config.vocab_size),
                "get_bos_id": eos, "get_eos_ids": [eos], "use_kv_cache": True, "enable_dynamic_shape": False}
    lowered = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()], constant_methods=metadata)
    buffer = lowered.to_executorch().buffer
    _written(path, lambda name: None if Path(name).write_bytes(buffer) else None)


def build_torchao_int8(model: Any, cache_length: int, path: Path, bugs: dict) -> None:
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    quantized = copy.deepcopy(model)
    quantize_(quantized, Int8WeightOnlyConfig())
    program = _step_program(quantized, cache_length, bugs)
    _written(path, lambda name: torch.export.save(program, name))


def build_torchao_int4(model: Any, cache_length: int, path: Path, bugs: dict) -> None:
    from torchao.quantization import IntxWeightOnlyConfig, PerGroup, quantize_

    quantized = copy.deepcopy(model)
    quantize_(quantized, IntxWeightOnlyConfig(weight_dtype=torch.int4,  # type: ignore[attr-defined]
                                          granularity=PerGroup(INT4_GROUP_SIZE)))
    program = _step_program(quantized, cache_length, bugs)
    _written(path, lambda name: torch.export.save(program, name))


KINDS = (
    DecodeKind("full-forward", FLOAT, ".pt2", "torch-export-full", build_full_forward),
    DecodeKind("decode-torch-export", FLOAT, ".pt2", "torch-export", build_torch_export),
    DecodeKind("decode-onnx", FLOAT, ".onnx", "onnxruntime", build_onnx, needs=("onnxruntime",)),
    DecodeKind("decode-executorch", FLOAT, ".pte", "executorch", build_executorch, needs=("executorch",)),
    # the runner's own generation is judged too (stepper.py): a runner that disagrees with the stepped loop fails the row
    DecodeKind("decode-executorch-runner", FLOAT, ".pte", "executorch-runner", build_executorch_runner, needs=("executorch",)),
    DecodeKind("decode-torchao-int8", INT8_WEIGHT, ".pt2", "torch-export", build_torchao_int8, needs=("torchao",), stepper_extra="torchao"),
    DecodeKind("decode-torchao-int4", INT4_WEIGHT, ".pt2", "torch-export", build_torchao_int4, needs=("torchao",), stepper_extra="torchao"),
)
KINDS_BY_NAME = {kind.name: kind for kind in KINDS}
