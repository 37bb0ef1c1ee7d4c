"""The coreml kind on the bundled ResNet (issue 27): built on any system, the zip is a Core ML ML
Program whose spec is the model's (one input of one sample, FLOAT32 compute, the output);
off macOS the row is not applicable with the reason, and the check's bundle carries the file to a Mac,
where a replay judges it (here a replay says why it cannot). The file is held to the runner contract
off macOS here (tests/runner_contract.py: its spec, and NotApplicable on entering its runner), in place
of a TinyNet build of it in tests/integration/test_artifact_contract.py."""

from __future__ import annotations

import platform
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest

from conftest import DEFAULT_ARCH, DEFAULT_CHECKPOINT, DEFAULT_GOLDEN, read_report
from export_check.artifacts import KINDS_BY_NAME, BuildContext
from export_check.artifacts.base import INPUT
from export_check.cache.secret import KEY_ENV
from export_check.cli import main
from export_check.golden.manifest import load_golden
from export_check.model import load_model
from runner_contract import eager_by_hand, holds_the_runner_contract

pytestmark = pytest.mark.skipif(platform.system() == "Darwin", reason="these assert what a system without Core ML prediction does")


def test_coreml_is_built_checked_bundled_and_not_applicable_off_macos(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with warnings.catch_warnings():  # coremltools imports executorch, which warns of its own deprecations
        warnings.simplefilter("ignore")
        import coremltools as ct

    monkeypatch.setenv(KEY_ENV, str(tmp_path / "lab.key"))
    assert main(["check", str(DEFAULT_CHECKPOINT), "--golden", str(DEFAULT_GOLDEN), "--artifacts", "coreml,onnx", "-q", "--no-cache",
                 "--out", str(tmp_path / "out"), "--json", str(tmp_path / "build.json"), "--bundle", str(tmp_path / "mac.bundle")]) == 0
    rows = {r["name"]: r for r in read_report(tmp_path / "build.json")["rows"]}
    row = rows["coreml"]
    assert row["status"] == "not-applicable" and "Core ML predicts only on macOS" in row["reasons"][0]
    assert row["details"]["compute_precision"] == "FLOAT32" and row["details"]["batch"].startswith("1 ")
    # the file, read outside the tool: a zipped .mlpackage whose spec is the ResNet's
    zipped = Path(row["artifact"]["path"])
    with zipfile.ZipFile(zipped) as archive:
        names = archive.namelist()
        assert all(n.startswith("coreml.mlpackage/") for n in names) and "coreml.mlpackage/Manifest.json" in names
        archive.extractall(tmp_path / "unzipped")
    spec = ct.utils.load_spec(str(tmp_path / "unzipped" / "coreml.mlpackage"))
    (image,) = spec.description.input
    shape = image.type.multiArrayType
    assert list(shape.shape) == [1, 3, 32, 32]  # one sample: the runner feeds a batch sample by sample
    (logits,) = spec.description.output
    assert logits.type.multiArrayType.dataType == ct.proto.FeatureTypes_pb2.ArrayFeatureType.FLOAT32  # FLOAT32 compute, not fp16
    assert row["details"]["coreml_inputs"] == image.name and row["details"]["coreml_outputs"] == logits.name
    # the runner contract off macOS, on the same file (where Core ML predicts, the contract module builds and runs it)
    kind = KINDS_BY_NAME["coreml"]
    ctx = BuildContext(model=None, example=None, opset=17, onnx_exporter="torchscript", threads=1)
    golden, resnet = load_golden(DEFAULT_GOLDEN), load_model(DEFAULT_CHECKPOINT, DEFAULT_ARCH, {}, None)
    holds_the_runner_contract("coreml", kind.open_runner(zipped, ctx), kind.family, eager_by_hand(resnet),
                              lambda size: {INPUT: np.stack([golden.load_input(item) for item in golden.inputs[:size]]).astype(np.float32)},
                              path=zipped, suffix=kind.suffix)
    assert rows["onnx"]["status"] == "pass"
    # the bundle carries it to a Mac; replayed here, the row says why it cannot run
    with zipfile.ZipFile(tmp_path / "mac.bundle") as bundle:
        assert "artifacts/coreml.zip" in bundle.namelist()
    assert main(["replay", str(tmp_path / "mac.bundle"), "--target", "linux-box", "--out", str(tmp_path / "r"), "-q",
                 "--json", str(tmp_path / "target.json")]) == 0
    replayed = {r["name"]: r for r in read_report(tmp_path / "target.json")["rows"]}
    assert replayed["coreml"]["status"] == "not-applicable"
    assert "the coreml runtime predicts only on macOS" in replayed["coreml"]["reasons"][0]
    assert replayed["onnx"]["metrics"]["mae"] == rows["onnx"]["metrics"]["mae"]
