"""Issue 24, item 2: ``export-check merge`` accepts only reports export-check wrote.

Every JSON report is sealed with an HMAC under the cache key (exporter/report/seal.py); merge checks the
seal on the file's bytes before it parses any JSON. A report edited to say "passed", one written by
hand, one sealed under someone else's key, and any byte changed anywhere are each refused with one
line naming the file, exit 2, the merge's own reports still written. The failing report is made to
fail on purpose: the checkpoint's classifier weights perturbed.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import DEFAULT_ARCH, DEFAULT_CHECKPOINT, DEFAULT_GOLDEN, read_report
from export_check.cache.secret import load_key
from export_check.cli import main
from export_check.errors import UsageError
from export_check.fleet.merge import merge
from export_check.report.seal import FIELD, seal

KIND = "torchscript-trace"


def _check(folder: Path, checkpoint: Path, name: str) -> tuple[int, Path]:
    report = folder / name
    code = main(["check", str(checkpoint), "--arch", DEFAULT_ARCH, "--golden", str(DEFAULT_GOLDEN), "--artifacts", KIND,
                 "--out", str(folder / f"out-{name}"), "--json", str(report), "-q", "--no-cache"])
    return code, report


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two real reports sealed under the module's key: the bundled model's (passes) and a perturbed
    copy's (its eager row fails)."""
    folder = tmp_path_factory.mktemp("sealed")
    key_file = folder / "key" / "cache.key"
    perturbed = folder / "perturbed.pth"
    state = torch.load(DEFAULT_CHECKPOINT, weights_only=True)
    state["fc.weight"] = state["fc.weight"] * 3.0 + 0.5
    torch.save(state, perturbed)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EXPORT_CHECK_CACHE_KEY_FILE", str(key_file))
        passing = _check(folder, DEFAULT_CHECKPOINT, "pass.json")
        failing = _check(folder, perturbed, "fail.json")
    assert passing[0] == 0 and failing[0] == 1
    return {"key": key_file, "pass": passing[1], "fail": failing[1]}


@pytest.fixture
def key(written, monkeypatch) -> Path:
    monkeypatch.setenv("EXPORT_CHECK_CACHE_KEY_FILE", str(written["key"]))
    return written["key"]


def _refused(capsys, argv: list[str], path: Path, says: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"export-check: error: {path}: {says}"), err


def test_reports_the_tool_wrote_merge_and_the_merged_report_is_sealed_too(written, key, tmp_path, capsys) -> None:
    assert written["pass"].read_text().startswith('{"' + FIELD + '": "hmac-sha256:')
    merged = tmp_path / "merged.json"
    assert main(["merge", str(written["pass"]), str(written["fail"]), "--json", str(merged)]) == 1
    data = json.loads(merged.read_text())
    assert [m["status"] for m in data["models"]] == ["pass", "fail"]
    assert main(["merge", str(merged), "--json", str(tmp_path / "again.json")]) == 1  # a merge's report merges again
    capsys.readouterr()


def test_a_failing_report_edited_to_say_passed_is_refused_and_the_merges_reports_are_still_written(written, key, tmp_path, capsys) -> None:
    text = written["fail"].read_text()
    edited = tmp_path / "edited.json"
    edited.write_text(text.replace('"passed": false', '"passed": true').replace('"exit_code": 1', '"exit_code": 0')
                      .replace('"status": "fail"', '"status": "pass"'))
    assert edited.read_text() != text
    out_json, out_xml = tmp_path / "merged.json", tmp_path / "merged.xml"
    _refused(capsys, ["merge", str(written["pass"]), str(edited), "--json", str(out_json), "--junit", str(out_xml)], edited,
             "edited since export-check wrote it (its seal does not match its content); pass the --json files")
    stopped = json.loads(out_json.read_text())
    assert stopped["exit_code"] == 2 and str(edited) in stopped["error"]["message"]
    assert "errors=\"1\"" in out_xml.read_text()


def test_a_hand_made_report_is_refused(written, key, tmp_path, capsys) -> None:
    """The real report's content, every field right, only without the seal: a hand-made report."""
    data = json.loads(written["pass"].read_text())
    data.pop(FIELD)
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(data, indent=2))
    _refused(capsys, ["merge", str(forged)], forged, "not a report export-check wrote (it carries no seal)")


def test_a_report_sealed_under_another_key_is_refused(written, key, tmp_path, monkeypatch, capsys) -> None:
    """An attacker's own export-check (or their own key) seals what they like; this machine's key does not match."""
    monkeypatch.setenv("EXPORT_CHECK_CACHE_KEY_FILE", str(tmp_path / "attacker.key"))
    other = load_key(tmp_path / "elsewhere")
    monkeypatch.setenv("EXPORT_CHECK_CACHE_KEY_FILE", str(key))
    body = written["fail"].read_text().split(",", 1)[1].replace('"passed": false', '"passed": true')
    forged = tmp_path / "resealed.json"
    forged.write_text(seal("{" + body, other))
    _refused(capsys, ["merge", str(forged)], forged, "sealed with another key (key ")


def test_without_a_key_the_report_is_written_unsealed_said_once_and_merge_refuses_it(written, key, tmp_path, monkeypatch, capfd) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.delenv("EXPORT_CHECK_CACHE_KEY_FILE")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(blocker))  # no key can be made below a file: an unwritable home, even for root
    code, report = _check(tmp_path, DEFAULT_CHECKPOINT, "unsealed.json")
    err = capfd.readouterr().err.splitlines()
    assert code == 0 and len(err) == 1 and err[0].startswith("export-check: the JSON report is not sealed (")
    assert json.loads(report.read_text())["passed"] is True and FIELD not in report.read_text()
    monkeypatch.setenv("EXPORT_CHECK_CACHE_KEY_FILE", str(key))
    assert main(["merge", str(report)]) == 2
    assert "not a report export-check wrote (it carries no seal)" in capfd.readouterr().err


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(where=st.floats(0, 1, exclude_max=True), flip=st.integers(1, 255))
def test_any_byte_changed_anywhere_is_refused_with_one_line(written, key, tmp_path, where: float, flip: int) -> None:
    data = bytearray(written["pass"].read_bytes())
    data[int(where * len(data))] ^= flip
    path = tmp_path / "changed.json"
    path.write_bytes(bytes(data))
    with pytest.raises(UsageError) as info:
        merge([path])
    assert str(info.value).startswith(f"{path}: ") and "\n" not in str(info.value)


# Issue 47, item 4: a target's evidence binds what was judged. A lab whose bundle is older than the build
# it is merged with (another checkpoint, another golden set, other gates) is refused, never a row that passes.

@pytest.fixture(scope="module")
def lab(written, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One checkpoint path, ``model.pth``, built four ways under the module's key: the bundled model (its
    bundle replayed on ``board``), the same with a golden set recorded from 16 of its inputs, the same
    judged again with a loose gate, and the model with one weight nudged (a later build of model.pth)."""
    folder = tmp_path_factory.mktemp("lab")
    model = folder / "model.pth"
    shutil.copy(DEFAULT_CHECKPOINT, model)
    subset = folder / "subset"
    subset.mkdir()
    for png in sorted((DEFAULT_GOLDEN / "inputs").glob("*.png"))[:16]:
        shutil.copy(png, subset / png.name)
    paths = {name: folder / f"{name}.json" for name in ("build", "board", "golden", "gates", "nudged")}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EXPORT_CHECK_CACHE_KEY_FILE", str(written["key"]))
        assert main(["check", str(model), "--arch", DEFAULT_ARCH, "--golden", str(DEFAULT_GOLDEN), "--artifacts", KIND, "-q", "--no-cache",
                     "--out", str(folder / "out"), "--json", str(paths["build"]), "--bundle", str(folder / "old.bundle")]) == 0
        assert main(["replay", str(folder / "old.bundle"), "--target", "board", "--out", str(folder / "replayed"), "-q",
                     "--json", str(paths["board"])]) == 0
        assert main(["golden", "record", str(model), "--arch", DEFAULT_ARCH, "--inputs", str(subset), "--size", "32",
                     "--golden", str(folder / "golden16"), "-q"]) == 0
        assert main(["check", str(model), "--arch", DEFAULT_ARCH, "--golden", str(folder / "golden16"), "--artifacts", KIND, "-q",
                     "--no-cache", "--out", str(folder / "out16"), "--json", str(paths["golden"])]) == 0
        assert main(["judge", str(paths["build"]), "--max-mae", "0.5", "--json", str(paths["gates"])]) == 0
        state = torch.load(model, weights_only=True)
        state["fc.weight"][0, 0] += 1e-3  # one weight nudged: a later build of the same checkpoint path
        torch.save(state, model)
        assert main(["check", str(model), "--arch", DEFAULT_ARCH, "--golden", str(DEFAULT_GOLDEN), "--artifacts", KIND, "-q",
                     "--no-cache", "--out", str(folder / "out-nudged"), "--json", str(paths["nudged"])]) in (0, 1)
    return paths


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _merge_refused(capsys, tmp_path: Path, reports: list[Path], refused: Path, says: str) -> str:
    """The merge exits 2 with one line naming ``refused``, and writes no merged report: its --json and --junit
    hold the error, whole, and nothing else is left beside them."""
    out_json, out_xml = tmp_path / "merged.json", tmp_path / "merged.xml"
    assert main(["merge", *map(str, reports), "--json", str(out_json), "--junit", str(out_xml)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"export-check: error: {refused}: ") and says in err[0], err
    stopped = read_report(out_json)
    assert stopped["exit_code"] == 2 and "models" not in stopped and stopped["error"]["message"] in err[0]
    assert 'errors="1"' in out_xml.read_text() and "board" in out_xml.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["merged.json", "merged.xml"]  # no temporary file left behind
    return err[0]


def test_a_target_that_replayed_the_current_bundle_merges_beside_its_build(lab, key, tmp_path, capsys) -> None:
    """The control: the bundle the build wrote, replayed, is bound to that build and merges."""
    assert main(["merge", str(lab["build"]), str(lab["board"]), "--json", str(tmp_path / "m.json")]) == 0
    merged = read_report(tmp_path / "m.json")
    assert [m["name"] for m in merged["models"]] == [str(lab["build"].parent / "model.pth"), f"{lab['build'].parent / 'model.pth'} @ board"]
    (row,) = merged["across_machines"]
    assert row["build_status"] == row["target_status"] == "pass" and row["build_mae"] == row["target_mae"]
    capsys.readouterr()


def test_a_target_that_replayed_an_older_bundle_of_another_checkpoint_is_refused_naming_the_field(lab, key, tmp_path, capsys) -> None:
    model = lab["build"].parent / "model.pth"
    old, new = _sha(DEFAULT_CHECKPOINT), _sha(model)  # by hand: the bundled model's bytes, and the nudged copy's
    assert old != new
    says = f"checkpoint sha256 {old[:12]} here, {new[:12]} there; replay the current bundle"
    for order in ([lab["nudged"], lab["board"]], [lab["board"], lab["nudged"]]):
        line = _merge_refused(capsys, tmp_path, order, lab["board"], says)
        assert f"{model} @ board replayed another bundle than its build in {lab['nudged']}" in line
        assert "--target board" in line and old not in line  # both values shortened
        for leftover in tmp_path.iterdir():
            leftover.unlink()


def test_a_target_judged_against_another_golden_set_is_refused_naming_the_field(lab, key, tmp_path, capsys) -> None:
    ours, theirs = _sha(DEFAULT_GOLDEN / "manifest.json"), _sha(lab["build"].parent / "golden16" / "manifest.json")
    assert read_report(lab["golden"])["checkpoint"]["sha256"] == read_report(lab["board"])["checkpoint"]["sha256"]  # only the golden set differs
    _merge_refused(capsys, tmp_path, [lab["golden"], lab["board"]], lab["board"],
                   f"golden manifest sha256 {ours[:12]} here, {theirs[:12]} there; replay the current bundle")


def test_a_target_judged_with_other_gates_is_refused_naming_the_gate(lab, key, tmp_path, capsys) -> None:
    gates = read_report(lab["gates"])["thresholds"]["float"]
    assert gates["max_mae"] == 0.5 and read_report(lab["board"])["thresholds"]["float"]["max_mae"] == 1e-05
    line = _merge_refused(capsys, tmp_path, [lab["gates"], lab["board"]], lab["board"], "gates (eager.max_mae) 1e-05 here, 0.5 there")
    assert line.endswith("or judge both reports with the same gates (export-check judge REPORT --json NEW)")
