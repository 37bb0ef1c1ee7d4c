"""The kinds people deploy from PyTorch today (torch.export, dynamo ONNX, AOTInductor, fp16 ONNX, torchao,
OpenVINO) on models of several named inputs and outputs, each checked against the artifact run by hand
beside eager; the rows that cannot apply say why (no C++ compiler, no torch.ao, no openvino); the fp16
gate fails a model fp16 cannot hold; artifact groups resolve from the command line and settings. The
AOTInductor file of the dict-output case is held to the runner contract here (tests/runner_contract.py),
in place of a TinyNet compile of its own in tests/integration/test_artifact_contract.py."""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from arches import TinyNet
from conftest import REPO, TESTS, save_state, seeded
from export_check.artifacts import KINDS_BY_NAME, BuildContext
from export_check.artifacts.base import NotApplicable
from export_check.cli import build_config, build_parser, main
from export_check.errors import ArtifactError, UsageError
from runner_contract import eager_by_hand, holds_the_runner_contract

sys.path.insert(0, str(Path(__file__).parent))
from test_multi_io import CASES, _record  # noqa: E402  (the multi-IO models and their recorded golden sets)

MODERN = ("torch-export", "onnx-dynamo", "onnx-fp16", "torchao-int8-dynamic", "openvino", "openvino-f32")


@pytest.fixture(scope="module", params=list(CASES))
def recorded(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    return _record(request.param, tmp_path_factory)


def _batch(folder: Path, count: int = 4) -> dict[str, np.ndarray]:
    """The first ``count`` samples as one batch (the first half of each set has one sequence length)."""
    files = sorted((folder / "samples").glob("*.npz"))[:count]
    loaded = [np.load(f) for f in files]
    return {name: np.stack([item[name] for item in loaded]) for name in loaded[0].files}


@pytest.mark.cpu_sensitive  # tests/run_narrowed.py repeats it under capped instruction sets
def test_multi_io_models_pass_every_new_kind_and_agree_with_the_files_run_by_hand(recorded) -> None:
    name, factory, folder, checkpoint, arch, outputs = recorded
    # every new kind on the dict and two-input models (one AOTInductor compile, on the dict output); the
    # three torch.export-based and fp16 ones on the tuple and time-major ones, to keep the module short
    kinds = {"dict": (*MODERN, "aoti"), "two-inputs": MODERN}.get(name, ("torch-export", "onnx-dynamo", "onnx-fp16"))
    report_path = folder / "modern.json"
    code = main(["check", str(checkpoint), "--arch", arch, "--golden", str(folder / "golden"), "--out", str(folder / "out-modern"),
                 "--no-cache", "-q", "--artifacts", ",".join(kinds), "--json", str(report_path)])
    report = json.loads(report_path.read_text())
    rows = {r["name"]: r for r in report["rows"]}
    assert code == 0, [(r["name"], r["reasons"]) for r in report["rows"]]
    assert list(rows) == ["eager", *(k for k in KINDS_BY_NAME if k in kinds)]
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "").upper()
    # oneDNN capped below VNNI on a VNNI CPU (tests/run_narrowed.py): torch still picks its VNNI int8 matmul by the
    # CPU's own flag, a mix no real CPU runs, so torchao's row does not apply there and says why
    vnni_mix = " avx512_vnni" in flags and cap in ("SSE41", "AVX", "AVX2", "AVX512_CORE")
    if vnni_mix and "torchao-int8-dynamic" in kinds:
        row = rows["torchao-int8-dynamic"]
        assert row["status"] == "not-applicable" and f"ONEDNN_MAX_CPU_ISA={os.environ['ONEDNN_MAX_CPU_ISA']}" in row["reasons"][0], row
        kinds = tuple(k for k in kinds if k != "torchao-int8-dynamic")
    for kind in kinds:
        row = rows[kind]
        assert row["status"] == "pass" and row["metrics"]["images"] == 20, (kind, row["reasons"])
        if len(outputs) > 1:
            assert [o["name"] for o in row["outputs"]] == list(outputs) and all(o["status"] == "pass" for o in row["outputs"])
        scale = row["metrics"]["reference_mean_abs"]
        bound = {"float": 1e-5, "fp16": 1e-2 * scale, "bf16": 2e-2 * scale, "int8": 0.05 * scale}
        assert row["metrics"]["mae"] <= bound[row["family"]], (kind, row["metrics"]["mae"])
    assert rows["onnx-fp16"]["details"]["graph_optimization_level"] == "ORT_ENABLE_ALL"
    if "openvino" in kinds:
        assert rows["openvino-f32"]["details"]["inference_precision"] == "f32"
        assert rows["openvino"]["details"]["weights"].startswith("fp16")
        assert ("avx2" in rows["openvino"]["details"]["cpu_flags"]) == (" avx2" in flags)
        # the deployed precision is the CPU's: bf16 where it has a bf16 path (and no instruction-set cap below
        # oneDNN's bf16 kernels, as tox's narrow run sets), and then the bf16 gate judges the row
        below_bf16 = cap in ("SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI")
        has_bf16 = (" avx512_bf16" in flags or " amx_bf16" in flags) and not below_bf16
        assert ("ONEDNN_MAX_CPU_ISA=" in rows["openvino"]["details"]["precision_hint"]) == below_bf16
        assert rows["openvino"]["details"]["inference_precision"] == ("bf16" if has_bf16 else "f32")
        assert (rows["openvino"]["family"], rows["openvino-f32"]["family"]) == ("bf16" if has_bf16 else "fp16", "float")

    # Outside the tool: the .pt2 and the dynamo ONNX file run by hand on a batch of real samples, beside eager.
    import onnxruntime as ort

    model = seeded(factory)
    model.load_state_dict(torch.load(checkpoint, weights_only=True))
    model.eval()
    batch = _batch(folder)
    tensors = [torch.from_numpy(batch[k]) for k in batch]
    with torch.inference_mode():
        eager = model(*tensors)
        program = torch.export.load(str(folder / "out-modern" / "torch-export.pt2")).module()
        exported = program(*tensors)
    flat_eager = eager.values() if isinstance(eager, dict) else eager if isinstance(eager, tuple) else (eager,)
    flat_exported = exported.values() if isinstance(exported, dict) else exported if isinstance(exported, tuple) else (exported,)
    for e, x in zip(flat_eager, flat_exported, strict=True):
        assert float((e - x).abs().mean()) <= 1e-6
    session = ort.InferenceSession(str(folder / "out-modern" / "onnx-dynamo.onnx"), providers=["CPUExecutionProvider"])
    ran = session.run(None, {i.name: batch[i.name] for i in session.get_inputs()})
    for e, x in zip(flat_eager, ran, strict=True):
        assert float(np.abs(e.numpy() - x).mean()) <= 1e-5
    if "aoti" in kinds:
        # the runner contract on the one AOTInductor compile of the module: named input x in, scores and boxes out,
        # at batch sizes 1 to 9 of real samples; a feed of an input it does not take is refused, naming the one it takes
        from export_check.golden.manifest import load_golden

        kind, path = KINDS_BY_NAME["aoti"], folder / "out-modern" / "aoti.pt2"
        ctx = BuildContext(model=None, example=None, opset=17, onnx_exporter="torchscript", threads=1,
                           signature=load_golden(folder / "golden").signature)
        samples = _batch(folder, 20)
        holds_the_runner_contract("aoti", kind.open_runner(path, ctx), kind.family, eager_by_hand(model),
                                  lambda size: {name: array[:size] for name, array in samples.items()}, path=path, suffix=kind.suffix,
                                  refusal=r"takes inputs x; got x, extra")


# --- rows that cannot apply say why --------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny() -> BuildContext:
    example = torch.from_numpy(np.random.default_rng(0).standard_normal((4, 3, 16, 16), dtype=np.float32))
    return BuildContext(model=seeded(TinyNet), example=example, opset=17, onnx_exporter="torchscript", threads=1)


def test_aoti_without_a_cpp_compiler_is_not_applicable_and_says_how_to_install_one(tiny, tmp_path: Path, monkeypatch) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("CXX", raising=False)
    with pytest.raises(NotApplicable, match=r"no C\+\+ compiler was found \(none of g\+\+, c\+\+, clang\+\+ is on PATH\); install one "
                                            r"\(Debian/Ubuntu: apt-get install g\+\+"):
        KINDS_BY_NAME["aoti"].build(tiny, tmp_path / "aoti.pt2", None)
    monkeypatch.setenv("CXX", "/opt/no-such/g++")
    with pytest.raises(NotApplicable, match=r"CXX=/opt/no-such/g\+\+ is not on PATH"):
        KINDS_BY_NAME["aoti"].build(tiny, tmp_path / "aoti.pt2", None)
    assert not list(tmp_path.glob("*.pt2"))


@pytest.mark.parametrize(("kind", "module", "hint"), [
    ("torch-int8-dynamic", "torch.ao.quantization", "has no torch.ao.quantization.quantize_dynamic"),
    ("torchao-int8-dynamic", "torchao", r'torchao is not installed: pip install "export-check\[modern\]"'),
    ("openvino", "openvino", r'openvino is not installed: pip install "export-check\[openvino\]"'),
    ("openvino-f32", "openvino", r'openvino is not installed: pip install "export-check\[openvino\]"'),
    ("onnx-dynamo", "onnxscript", "the dynamo ONNX exporter needs onnxscript"),
])
def test_a_missing_library_makes_its_row_not_applicable(tiny, tmp_path: Path, monkeypatch, kind: str, module: str, hint: str) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # import raises ImportError, as when it is not installed
    with pytest.raises(NotApplicable, match=hint):
        KINDS_BY_NAME[kind].build(tiny, tmp_path / KINDS_BY_NAME[kind].filename(), None)


def test_an_fp16_crash_at_the_pinned_level_is_the_rows_error_naming_the_level(tmp_path: Path, monkeypatch) -> None:
    from export_check.artifacts import onnx_fp16

    model = tmp_path / "m.onnx"
    model.write_bytes(b"not an onnx file")
    with pytest.raises(ArtifactError, match="could not load the fp16 model at graph optimisation level ORT_ENABLE_ALL"):
        onnx_fp16.probe_load(model, "ORT_ENABLE_ALL")
    monkeypatch.setattr(onnx_fp16, "_PROBE", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    with pytest.raises(ArtifactError, match=r"onnxruntime crashed \(SIGSEGV\) loading and running the fp16 model at graph optimisation "
                                            r"level ORT_ENABLE_BASIC; a lower level may load it: set onnx-fp16-optimization = \"basic\""):
        onnx_fp16.probe_load(model, "ORT_ENABLE_BASIC")



def test_the_bundled_vits_fp16_file_crashes_onnxruntime_at_all_and_passes_at_the_basic_level_the_settings_pin(
        digit_images: Path, tmp_path: Path) -> None:
    """The bundled ViT's fp16 graph segfaults onnxruntime at ORT_ENABLE_ALL (the default a deployment
    gets): the row is an error naming the level and the setting to change. With
    `onnx-fp16-optimization = "basic"` the same file loads, is recorded at that level and passes its
    gate; the level is part of the cache key, so the error is not served to the second run."""
    arch = [str(REPO / "models" / "checkpoints" / "vit_digits.pth"), "--arch", f"{REPO / 'models' / 'vit.py'}:VisionTransformer",
            "--arch-kwargs", json.dumps({"num_classes": 10, "in_channels": 3, "image_size": 32})]
    golden = ["--golden", str(tmp_path / "golden")]
    assert main(["golden", "record", *arch, *golden, "--inputs", str(digit_images), "--size", "32", "--mode", "RGB",
                 "--mean", "0.5,0.5,0.5", "--std", "0.5,0.5,0.5"]) == 0
    run = ["check", *arch, *golden, "--artifacts", "onnx-fp16", "--cache-dir", str(tmp_path / "cache"), "-q", "--out", str(tmp_path / "out")]
    assert main([*run, "--json", str(tmp_path / "all.json")]) == 1
    row = json.loads((tmp_path / "all.json").read_text())["rows"][1]
    assert row["status"] == "error" and "crashed (SIGSEGV)" in row["reasons"][0] and "ORT_ENABLE_ALL" in row["reasons"][0], row
    assert "onnx-fp16-optimization" in row["reasons"][0]
    (tmp_path / "basic.toml").write_text('onnx-fp16-optimization = "basic"\n')
    assert main([*run, "--config", str(tmp_path / "basic.toml"), "--json", str(tmp_path / "basic.json")]) == 0
    report = json.loads((tmp_path / "basic.json").read_text())
    row = report["rows"][1]
    assert row["status"] == "pass" and row["details"]["graph_optimization_level"] == "ORT_ENABLE_BASIC", row
    assert 1e-5 < row["metrics"]["relative_mae"] < 0.01  # really fp16: not float32's ~1e-7, within the fp16 gate
    assert report["settings"]["inference"]["onnx_fp16_graph_optimization_level"] == "basic"


# --- the fp16 gate, and the groups -----------------------------------------------------------------------


LOUD_NET = """
import torch
from torch import nn


class LoudNet(nn.Module):
    \"\"\"A small classifier whose logits are around 1e6: float32 holds them, float16 (max 65504) does not.\"\"\"

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(32, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x) * 1e6
"""


def test_the_fp16_gate_fails_a_model_fp16_cannot_hold_while_float_onnx_passes(digit_images: Path, tmp_path: Path) -> None:
    (tmp_path / "loud.py").write_text(LOUD_NET)
    namespace: dict = {}
    exec(compile(LOUD_NET, "loud.py", "exec"), namespace)
    checkpoint = save_state(seeded(namespace["LoudNet"]), tmp_path / "loud.pth")
    arch = f"{tmp_path / 'loud.py'}:LoudNet"
    golden = tmp_path / "golden"
    assert main(["golden", "record", str(checkpoint), "--arch", arch, "--inputs", str(digit_images), "--golden", str(golden), "--size", "32"]) == 0
    code = main(["check", str(checkpoint), "--arch", arch, "--golden", str(golden), "--out", str(tmp_path / "out"), "--no-cache", "-q",
                 "--artifacts", "onnx,onnx-fp16", "--max-mae", "0.1", "--json", str(tmp_path / "r.json")])
    rows = {r["name"]: r for r in json.loads((tmp_path / "r.json").read_text())["rows"]}
    assert code == 1 and rows["onnx"]["status"] == "pass"
    fp16 = rows["onnx-fp16"]
    # float32 rounding at 1e6 is 8e-3 absolute (hence --max-mae 0.1), 5e-8 relative; float16's is off the scale
    assert rows["onnx"]["metrics"]["relative_mae"] < 1e-6
    assert fp16["status"] == "fail" and fp16["family"] == "fp16" and fp16["metrics"]["relative_mae"] > 0.5
    assert fp16["reasons"][0].startswith("relative MAE 0.") and fp16["reasons"][0].split()[2] != "0.01"


def test_groups_and_kinds_resolve_from_the_command_line_and_settings(tmp_path: Path, monkeypatch) -> None:
    from export_check.artifacts import DEFAULT_KINDS, KIND_NAMES

    monkeypatch.chdir(tmp_path)
    checkpoint = tmp_path / "m.pth"
    checkpoint.write_bytes(b"x")

    def config(*argv: str):
        return build_config(build_parser().parse_args(["check", str(checkpoint), "--arch", f"{TESTS / 'arches.py'}:TinyNet", *argv]))

    assert config().selected_kinds == DEFAULT_KINDS
    assert config("--artifacts", "all").selected_kinds == KIND_NAMES
    modern = ("torch-export", "onnx-dynamo", "onnx-fp16", "torchao-int8-dynamic", "onnx-int8-static", "pt2e-int8-static",
              "onnx-dynamo-simplified", "onnx-dynamo-int8-dynamic")
    assert config("--artifacts", "aoti,modern").kinds == ("aoti", *modern)
    assert config("--artifacts", "aoti,modern").selected_kinds == (*modern[:4], "aoti", *modern[4:])  # the table's order
    (tmp_path / "export-check.toml").write_text('artifacts = ["default", "aoti"]\n')
    assert config().kinds == (*DEFAULT_KINDS, "aoti")
    with pytest.raises(UsageError, match="unknown artifact kind.s. defualt; choose from the groups default, modern, edge, all or the kinds"):
        config("--artifacts", "defualt")
    with pytest.raises(UsageError, match="listed twice"):
        config("--artifacts", "modern,modern")


def test_a_recurrent_model_whose_time_axis_torch_export_pins_is_not_applicable_and_strict_fails_it(tmp_path: Path) -> None:
    """The bundled recogniser (a BiLSTM over the image's width, golden widths 48/64/80): torch.export
    keeps the width symbolic but its LSTM decomposition adds a guard fixing the time steps, so the
    `.pt2` refuses every width but the example's (checked here by hand: eager takes width 96, the
    exported program does not). The torch.export-based kinds are then `not applicable`, naming the
    LSTM and the upstream issue, not a build error; `--strict` fails them."""
    from models.multi_io import SequenceRecognizer

    model = SequenceRecognizer().eval()
    model.load_state_dict(torch.load(REPO / "models" / "checkpoints" / "sequence_recognizer.pth", weights_only=True))
    dim = torch.export.Dim.DYNAMIC
    with warnings.catch_warnings():  # torch.export's own UserWarning about nn.LSTM's _flat_weights
        warnings.simplefilter("ignore")
        program = torch.export.export(model, (torch.randn(2, 1, 16, 48),), dynamic_shapes=({0: dim, 3: dim},), strict=False)
    wide = torch.randn(2, 1, 16, 96)
    assert model(wide).shape == (24, 2, 11)
    with pytest.raises(Exception, match="Guard failed"):
        program.module()(wide)

    weights = REPO / "models" / "checkpoints" / "sequence_recognizer.pth"
    config = REPO / "models" / "examples" / "sequence_recognizer.toml"
    args = [str(weights), "--config", str(config), "--artifacts", "torch-export", "--no-cache", "-q", "--out", str(tmp_path / "out")]
    assert main([*args, "--strict", "--json", str(tmp_path / "r.json")]) == 1
    row = {r["name"]: r for r in json.loads((tmp_path / "r.json").read_text())["rows"]}["torch-export"]
    assert row["status"] == "fail" and row["reasons"][0].startswith("not applicable: torch.export cannot keep"), row
    assert "LSTM" in row["reasons"][0] and "pytorch/pytorch#115092" in row["reasons"][0] and "Guard failed" in row["reasons"][0]
    assert row["reasons"][0].endswith("(--strict: a kind that does not apply fails)")
