"""A replay decides OpenVINO's inference precision, and with it the row's gate family, from the target's own
runtime and CPU (issue 44, item 6), never from the build machine's: the target's precision is what its OpenVINO
CPU plugin reports (``openvino_ir.plugin_precision``), played here for a bf16 target and an f32 one by
monkeypatching that report in the replay's process. The gates are set so that the verdict tells the families
apart on any CPU: the bf16 gate (relative MAE <= 1e-6) fails any OpenVINO row (its fp16 weights alone move the
outputs far more), the fp16 gate (<= 50 %) passes one; the pinned ``openvino-f32`` row stays f32 whatever the
target reports. Without the patch the row carries what this machine's OpenVINO reports itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import TESTS, read_report, save_state, seeded
from export_check.artifacts import openvino_ir
from export_check.cache.secret import KEY_ENV
from export_check.cli import main

pytest.importorskip("openvino")

ARCH = f"{TESTS / 'arches.py'}:TinyNet"


@pytest.fixture(scope="module")
def bundled(tmp_path_factory: pytest.TempPathFactory, digit_images: Path) -> tuple[Path, Path, dict]:
    """(bundle, its key file, the build's report) of TinyNet checked with both OpenVINO kinds under a bf16 gate no
    OpenVINO row meets and an fp16 gate every one does."""
    from arches import TinyNet

    root = tmp_path_factory.mktemp("precision")
    key = root / "lab.key"
    checkpoint = save_state(seeded(TinyNet), root / "model.pth")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(KEY_ENV, str(key))
        assert main(["golden", "record", str(checkpoint), "--arch", ARCH, "--inputs", str(digit_images), "--golden", str(root / "golden"),
                     "--size", "32", "--batch-size", "8", "-q"]) == 0
        main(["check", str(checkpoint), "--arch", ARCH, "--golden", str(root / "golden"), "--artifacts", "openvino,openvino-f32",
              "--batch-size", "8", "--bf16-max-relative-mae", "1e-6", "--fp16-max-relative-mae", "0.5", "-q", "--out", str(root / "out"),
              "--json", str(root / "build.json"), "--bundle", str(root / "lab.bundle")])
    return root / "lab.bundle", key, read_report(root / "build.json")


def _replayed(bundled, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reported: str | None) -> dict[str, dict]:
    bundle, key, _ = bundled
    monkeypatch.setenv(KEY_ENV, str(key))
    if reported is not None:  # the target's OpenVINO reports this precision (openvino_ir.target_details reads it)
        monkeypatch.setattr(openvino_ir, "plugin_precision", lambda: reported)
    main(["replay", str(bundle), "--target", f"target-{reported}", "--out", str(tmp_path / "out"), "-q", "--json", str(tmp_path / "t.json")])
    return {row["name"]: row for row in read_report(tmp_path / "t.json")["rows"]}


def _capped() -> bool:  # an instruction-set cap below bf16 (tox's narrow run): OpenVINO's rows pin f32 there
    return openvino_ir.bf16_capped() is not None


@pytest.mark.parametrize("reported", ["bf16", "f32"])
def test_the_targets_reported_precision_labels_the_row_and_picks_its_gate(bundled, tmp_path: Path, monkeypatch, reported: str) -> None:
    _, _, build = bundled
    built = {row["name"]: row for row in build["rows"]}
    rows = _replayed(bundled, tmp_path, monkeypatch, reported)
    row, pinned = rows["openvino"], rows["openvino-f32"]
    precision = "f32" if _capped() else reported
    assert row["details"]["inference_precision"] == precision, row["details"]
    assert row["details"]["build_inference_precision"] == built["openvino"]["details"]["inference_precision"]
    assert f"INFERENCE_PRECISION_HINT={precision}" in row["details"]["precision_hint"] or _capped()
    if precision == "bf16":  # the user's bf16 gate judges it: 1e-6 relative MAE, which no OpenVINO row meets
        assert row["family"] == "bf16" and row["status"] == "fail", (row["family"], row["status"])
        assert row["metrics"]["relative_mae"] > 1e-6 and any("1e-06" in reason for reason in row["reasons"]), row["reasons"]
    else:  # the fp16 gate (50 %)
        assert row["family"] == "fp16" and row["status"] == "pass", (row["family"], row["reasons"])
    # the target's CPU flags, as a CPU-dependent row carries them, not the build's copied
    assert "cpu_flags" in row["details"]
    # pinned f32 stays f32, whatever the target's default
    assert pinned["details"]["inference_precision"] == "f32" and pinned["family"] == "float", pinned["details"]
    assert pinned["details"]["precision_hint"] == "f32 (pinned)"


def test_without_a_patch_the_row_carries_what_this_machines_openvino_reports(bundled, tmp_path: Path, monkeypatch) -> None:
    import openvino as ov

    # OpenVINO's own report, read here beside the tool: bf16 on a CPU with avx512_bf16 or AMX, f32 on others
    reported = getattr(ov.Core().get_property("CPU", "INFERENCE_PRECISION_HINT"), "get_type_name", lambda: "?")()
    expected = "f32" if _capped() else reported
    row = _replayed(bundled, tmp_path, monkeypatch, None)["openvino"]
    assert row["details"]["inference_precision"] == expected
    assert row["family"] == ("bf16" if expected == "bf16" else "fp16")
    assert row["status"] == ("fail" if expected == "bf16" else "pass"), row["reasons"]
