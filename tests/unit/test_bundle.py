"""Bundles (exporter/bundle.py) and what a replay reads of them (exporter/replay.py), without a model:
the same inputs give the same bytes, any file given as a bundle opens or is one line, and a runtime's
absence is found without importing it."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from export_check.artifacts import KINDS
from export_check.artifacts.runtimes import RUNTIME_MODULES
from export_check.bundle import BundledArtifact, bundle_key, open_bundle, write_bundle
from export_check.cache.secret import KEY_ENV
from export_check.errors import UsageError
from export_check.replay import missing_runtime


@pytest.fixture()
def lab_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(KEY_ENV, str(tmp_path / "lab.key"))
    return tmp_path / "lab.key"


def _write(path: Path, artifact: Path) -> int:
    data = artifact.read_bytes()
    entry = BundledArtifact(name="onnx", family="float", file="artifacts/onnx.onnx", sha256=hashlib.sha256(data).hexdigest(),
                            size_bytes=len(data), details=(("opset", "17"),), build_status="pass", build_metrics={"mae": 1e-7})
    rng = np.random.default_rng(0)
    batches = [(start, {"input": rng.standard_normal((4, 3)).astype(np.float32)}, {"logits": rng.standard_normal((4, 2))})
               for start in (0, 4)]
    manifest = {"samples": 8, "settings": {"batch_size": 4}, "calibration": {"indices": [0]}}  # the counts a reader checks (bundle_reading.py)
    return write_bundle(path, manifest, [(entry, artifact)], iter(batches), path.parent / "cache")


def test_the_same_inputs_give_the_same_bytes_and_every_member_reads_back(tmp_path: Path, lab_key: Path) -> None:
    artifact = tmp_path / "model.onnx"
    artifact.write_bytes(b"an onnx file's bytes")
    size = _write(tmp_path / "a.bundle", artifact)
    _write(tmp_path / "b.bundle", artifact)
    assert (tmp_path / "a.bundle").read_bytes() == (tmp_path / "b.bundle").read_bytes() and size == (tmp_path / "a.bundle").stat().st_size
    bundle = open_bundle(tmp_path / "a.bundle")
    try:
        assert bundle.manifest["samples"] == 8 and bundle.manifest["batches"] == [[0, 4], [4, 4]]
        assert bundle.read("artifacts/onnx.onnx") == b"an onnx file's bytes"
        (start, feeds, eager), _ = list(bundle.batches(("logits",), ("input",)))
        assert start == 0 and feeds["input"].shape == (4, 3) and eager["logits"].dtype == np.float64
    finally:
        bundle.close()


def test_an_artifact_changed_since_the_check_is_not_bundled(tmp_path: Path, lab_key: Path) -> None:
    artifact = tmp_path / "model.onnx"
    artifact.write_bytes(b"judged")
    data = b"judged"
    entry = BundledArtifact(name="onnx", family="float", file="artifacts/onnx.onnx", sha256=hashlib.sha256(data).hexdigest(),
                            size_bytes=6, details=(), build_status="pass", build_metrics=None)
    artifact.write_bytes(b"swapped")
    with pytest.raises(UsageError, match="changed since the check judged it"):
        write_bundle(tmp_path / "x.bundle", {}, [(entry, artifact)], iter(()), tmp_path / "cache")
    assert not (tmp_path / "x.bundle").exists()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=400))
def test_any_file_given_as_a_bundle_is_one_line(tmp_path: Path, lab_key: Path, data: bytes) -> None:
    bundle_key  # noqa: B018 - the key the replay reads (made here by the first seal)
    path = tmp_path / "given.bundle"
    path.write_bytes(data)
    with pytest.raises(UsageError) as refused:
        open_bundle(path)
    assert "\n" not in str(refused.value) and str(path) in str(refused.value)


def test_every_kinds_runtime_names_the_modules_a_replay_needs() -> None:
    assert {k.runtime for k in KINDS} <= set(RUNTIME_MODULES)
    assert missing_runtime("onnxruntime") is None
    assert RUNTIME_MODULES["executorch"] == ("executorch", "torch")  # its Python runtime needs torch tensors
