"""One contract, every artifact kind: build writes a complete file, the runner reloads it from disk
and maps any batch size to float32 logits, the same on every call (tests/runner_contract.py). The kinds
are built once for the module, on a tiny model, except those whose own test module already builds them
on a real model and holds that file to the same contract there (``HELD_ELSEWHERE``: aoti, the executorch
kinds, coreml off macOS, litert in its own environment); a test proves every kind is held in one place or
the other, and that each file the table names really calls the contract."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from arches import TinyNet
from conftest import seeded
from export_check.artifacts import KIND_NAMES, KINDS, KINDS_BY_NAME, BuildContext
from export_check.artifacts.base import INPUT
from export_check.artifacts.runtimes import RUNTIMES_BY_NAME
from export_check.builder.builds import build_artifact
from export_check.diagnostics.layers import method
from export_check.errors import ArtifactError
from export_check.gates import FAMILIES
from export_check.model import EagerRunner
from runner_contract import eager_by_hand, holds_the_runner_contract

# Kinds whose contract is held by another module, on the file it builds anyway (a real model's: the slow kinds, each
# 19-40 s to build on TinyNet too, litert in its own environment, Core ML where it cannot predict): read off each kind's
# row (``ArtifactKind.contract``; a runtime bound to systems is held here on those systems), with what in that file
# calls the contract.
CONTRACT_CALL = "holds_the_runner_contract("


def _held_in(kind) -> str | None:
    systems = RUNTIMES_BY_NAME[kind.runtime].systems
    return None if kind.contract is None or (systems and platform.system() in systems) else kind.contract


HELD_ELSEWHERE: dict[str, tuple[str, str]] = {k.name: (where, CONTRACT_CALL) for k in KINDS if (where := _held_in(k)) is not None}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[BuildContext, dict[str, Path], torch.nn.Module]:
    model = seeded(TinyNet)
    example = torch.from_numpy(np.random.default_rng(0).standard_normal((4, 3, 16, 16), dtype=np.float32))
    # the static int8 kinds calibrate on inputs of the distribution the contract feeds them
    calibration = ({INPUT: np.random.default_rng(2).standard_normal((16, 3, 16, 16), dtype=np.float32)},)
    ctx = BuildContext(model=model, example=example, opset=17, onnx_exporter="torchscript", threads=1, calibration=calibration)
    out = tmp_path_factory.mktemp("contract")
    paths: dict[str, Path] = {}
    for kind in KINDS:
        if kind.name in HELD_ELSEWHERE:
            continue  # built on a real model by its own module, which holds that file to the contract
        source = paths.get(kind.source) if kind.source else None
        outcome = build_artifact(kind, ctx, out / kind.filename(), source)
        if outcome.not_applicable and "a mix no real CPU runs" in (outcome.error or ""):
            continue  # torchao under a oneDNN cap that hides the VNNI torch sees (README, "What varies by CPU"): no file to hold to it
        assert outcome.error is None and outcome.path == out / kind.filename(), outcome.error
        paths[kind.name] = outcome.path
    return ctx, paths, model


def test_table_is_complete_and_ordered() -> None:
    # reports keep the table's order: the kinds users know keep their places, a new kind comes after them
    # (so adding one touches its module, its row, its test and the README only: tests/unit/artifacts/test_kinds.py)
    assert [k.name for k in KINDS][:18] == [
        "torchscript-trace", "torchscript-script", "onnx", "onnx-simplified", "torch-int8-dynamic", "onnx-int8-dynamic",
        "torch-export", "onnx-dynamo", "onnx-fp16", "torchao-int8-dynamic", "aoti", "openvino", "openvino-f32",
        "onnx-int8-static", "pt2e-int8-static", "onnx-dynamo-simplified", "onnx-dynamo-int8-dynamic", "onnx-dynamo-int8-static",
    ]
    assert len(set(KIND_NAMES)) == len(KINDS)
    # a calibrated kind says so to the user in its description: judged on the samples outside the split
    assert all(("calibrat" in k.description) == k.calibrated for k in KINDS)
    for kind in KINDS:
        # the per-layer method a row names is a module of diagnostics/layers/; the kinds without one get a diagnosis that
        # says so (compare_layers)
        assert kind.family in FAMILIES and (kind.layers is None or callable(method(kind.layers)))
        assert kind.source is None or KINDS.index(KINDS_BY_NAME[kind.source]) < KINDS.index(kind)
        impl = kind.impl()
        assert callable(impl.build) and callable(impl.open_runner)


@pytest.mark.parametrize("name", ["eager", *(k.name for k in KINDS if k.name not in HELD_ELSEWHERE)])
def test_every_kind_honours_the_runner_contract(built, name: str) -> None:
    """Named inputs in, named outputs out: every artifact reloaded from its file, and the eager model."""
    ctx, paths, model = built
    rng = np.random.default_rng(1)

    def batch(size: int) -> dict[str, np.ndarray]:
        return {INPUT: rng.standard_normal((size, 3, 16, 16), dtype=np.float32)}

    if name == "eager":
        holds_the_runner_contract(name, EagerRunner(model), "float", eager_by_hand(model), batch, after_exit=False)
        return
    kind = KINDS_BY_NAME[name]
    if name not in paths:  # only the one mix the fixture lets through
        assert name == "torchao-int8-dynamic" and os.environ.get("ONEDNN_MAX_CPU_ISA"), name
        pytest.skip("torchao-int8-dynamic does not apply under a oneDNN cap that hides this CPU's VNNI (a mix no real CPU runs)")
    path = paths[name]
    holds_the_runner_contract(name, kind.open_runner(path, ctx), kind.family, eager_by_hand(model), batch, path=path, suffix=kind.suffix)


def test_every_kind_is_held_to_the_contract_here_or_by_the_module_the_table_names(built) -> None:
    """No kind silently loses its contract: each is built by this module's fixture (and so parametrized above), or
    named in ``HELD_ELSEWHERE`` with a module that exists and calls the contract on it."""
    _, paths, _ = built
    assert set(HELD_ELSEWHERE) <= set(KIND_NAMES), set(HELD_ELSEWHERE) - set(KIND_NAMES)
    for kind in KINDS:
        if kind.name not in HELD_ELSEWHERE:
            assert kind.name in paths or (kind.name == "torchao-int8-dynamic" and os.environ.get("ONEDNN_MAX_CPU_ISA")), kind.name
            continue
        module, call = HELD_ELSEWHERE[kind.name]
        source = (Path(__file__).parent / module).read_text()
        assert call in source, (kind.name, module, call)
        if call == CONTRACT_CALL:  # the helper imported there, and the kind named there
            assert "from runner_contract import" in source and f'"{kind.name}"' in source, (kind.name, module)


def test_onnx_simplified_with_a_fixed_batch_axis_is_refused(built, tmp_path: Path) -> None:
    import onnx

    from export_check.artifacts._common import require_dynamic_batch

    _, paths, _ = built
    model = onnx.load(str(paths["onnx-simplified"]))
    for value in (model.graph.input[0], model.graph.output[0]):
        value.type.tensor_type.shape.dim[0].dim_value = 4
    fixed = tmp_path / "fixed.onnx"
    onnx.save(model, str(fixed))
    with pytest.raises(ArtifactError, match="batch axis is fixed to 4"):
        require_dynamic_batch(fixed, "onnxsim")
    require_dynamic_batch(paths["onnx-simplified"], "onnxsim")  # the real one keeps "batch"


def test_native_warnings_become_python_warnings_and_other_stderr_passes_through(capfd) -> None:
    """What torch's C++ side prints during a load: its warning line is a NativeWarning (the pipeline
    files it in the row's notes); any other output reaches stderr unchanged."""
    from export_check.artifacts._common import NativeWarning, native_warnings

    line = b"[W1129 18:18:02.751058369 Quantizer.cpp:111] Warning: torch.quantize_per_tensor is deprecated. (function operator())\n"
    with pytest.warns(NativeWarning, match=r"^torch\.quantize_per_tensor is deprecated\.$"), native_warnings():
        os.write(2, line + b"something else a library printed\n")
    err = capfd.readouterr().err
    assert err == "something else a library printed\n"


def test_native_warnings_without_a_stderr_does_nothing(tmp_path: Path) -> None:
    script = "import os; os.close(2)\nfrom export_check.artifacts._common import native_warnings\nwith native_warnings(): pass\nprint('ok')"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout == "ok\n", result


def test_groups_resolve_to_kinds_in_table_order() -> None:
    from export_check.artifacts import DEFAULT_KINDS, GROUPS, KIND_NAMES, resolve_kinds

    assert resolve_kinds(["all"]) == KIND_NAMES and resolve_kinds(["default"]) == tuple(k for k in KIND_NAMES if k in DEFAULT_KINDS)
    assert "aoti" not in DEFAULT_KINDS and "aoti" not in GROUPS["modern"], "aoti is opt-in: a C++ compile per run"
    assert not {"openvino", "openvino-f32", "onnx-dynamo", "torchao-int8-dynamic"} & set(DEFAULT_KINDS), "optional extras stay opt-in"
    assert resolve_kinds(["onnx-fp16", "modern", "onnx"]) == ("onnx-fp16", "torch-export", "onnx-dynamo", "torchao-int8-dynamic", "onnx-int8-static",
                                                              "pt2e-int8-static", "onnx-dynamo-simplified", "onnx-dynamo-int8-dynamic", "onnx")
    assert not {k.name for k in KINDS if k.calibrated or k.source == "onnx-dynamo"} & set(DEFAULT_KINDS), "the new kinds are opt-in"


def test_a_static_kind_without_a_calibration_split_is_an_error_naming_it(built, tmp_path: Path) -> None:
    """The fixture's TinyNet onnx file is the source (not exported again); the context has no calibration split."""
    _, paths, _ = built
    ctx = BuildContext(model=seeded(TinyNet), example=torch.zeros(2, 3, 16, 16), opset=17, onnx_exporter="torchscript", threads=1)
    for name, source in (("onnx-int8-static", paths["onnx"]), ("pt2e-int8-static", None)):
        outcome = build_artifact(KINDS_BY_NAME[name], ctx, tmp_path / KINDS_BY_NAME[name].filename(), source)
        assert outcome.error is not None and "calibration split" in outcome.error and "at least 2 samples" in outcome.error, outcome.error
        assert not (tmp_path / KINDS_BY_NAME[name].filename()).exists(), "no half-built file is left behind"
