"""Hostile and careless files through the real CLI (issue 24, items 3-5): settings and fleet files,
merged reports, history files, cache sizes, golden samples that inflate or hold what the model cannot
take, models that raise on the golden inputs, outputs that would be lost or judged on nothing.

Every case checks the whole contract: exit 2, stderr exactly one ``export-check: error:`` line naming
the file, no traceback, nothing hangs (a deadline), and the JSON (and JUnit) report asked for is
still written, as the error form. The hypothesis tests at the end feed the parsers random text.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import DEFAULT_ARCH, DEFAULT_CHECKPOINT, DEFAULT_GOLDEN, TESTS, deadline, forge_golden_file, save_state, seeded
from export_check import parsing
from export_check.cli import main
from export_check.errors import ArtifactError, UsageError
from export_check.golden.inputs import declared_bytes
from export_check.golden.manifest import MANIFEST, read_manifest
from export_check.golden.reading import SAMPLE_MAX_BYTES
from export_check.history import HistoryError, parse_line
from export_check.signature import flatten_outputs

FAULTS = TESTS / "fault_arches.py"
TINY = f"{TESTS / 'arches.py'}:TinyNet"


def run(capfd, *argv: object) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capfd.readouterr()
    return code, out, err


def one_line(err: str, *fragments: str) -> str:
    assert err.startswith("export-check: error: ") and err.endswith("\n") and err.count("\n") == 1, err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in err, (fragment, err)
    return err


def error_report(path: Path, err: str) -> dict:
    """The JSON report a stopped run still writes: the error form, carrying the very line printed."""
    doc = json.loads(path.read_text())
    assert doc["exit_code"] == 2 and doc["passed"] is False
    assert f"export-check: error: {doc['error']['message']}" == err.strip()
    return doc




def check_argv(tmp_path: Path, *extra: object, checkpoint: Path = DEFAULT_CHECKPOINT, arch: str = DEFAULT_ARCH,
               golden: Path = DEFAULT_GOLDEN) -> list[object]:
    return [checkpoint, "--arch", arch, "--golden", golden, "--out", tmp_path / "out", "--artifacts", "torchscript-trace", "--no-cache",
            "-q", "--json", tmp_path / "report.json", *extra]


# --- TOML: settings (--config) and fleet files ---------------------------------------------------

TOML_CASES = {
    # name: (the file's bytes after its table header, what the line says)
    "deep-arrays": (b"arch-kwargs = { x = " + b"[" * 3000 + b"]" * 3000 + b" }\n", "nests arrays or inline tables too deeply"),
    "deep-inline-tables": (b"arch-kwargs = " + b"{a=" * 3000 + b"1" + b"}" * 3000 + b"\n", "nests arrays or inline tables too deeply"),
    "deep-dotted-keys": (b"arch-kwargs." + b".".join([b"a"] * 200) + b" = 1\n", "levels deep at tool"),
    "5000-digit-integer": (b"batch-size = " + b"9" * 5000 + b"\n", "holds an integer of over 4,300 digits"),
    "4000-digit-integer": (b"arch-kwargs = { n = " + b"9" * 4000 + b" }\n", "outside the 64-bit range"),
    "non-utf8": (b"batch-size = 8 # caf\xe9\n", "is not UTF-8 text (byte 0xe9"),
    "nan": (b"arch-kwargs = { scale = nan }\n", "is nan, not a finite number"),
    "cache-max-size-inf": (b"cache-max-size = inf\n", "is inf, not a finite number"),
    "cache-max-size-1e308": (b"cache-max-size = 1e308\n", "cache-max-size must be a number of GB from 0 to 1e+09, got 1e+308"),
}


@pytest.mark.parametrize("case", sorted(TOML_CASES))
def test_a_hostile_settings_file_is_one_line_and_the_report_is_still_written(case: str, tmp_path: Path, capfd) -> None:
    body, says = TOML_CASES[case]
    config = tmp_path / "pyproject.toml"
    config.write_bytes(b"[tool.export-check]\n" + body)
    with deadline(60):
        code, out, err = run(capfd, *check_argv(tmp_path, "--config", config))
    assert code == 2 and out == ""
    one_line(err, str(config), says)
    error_report(tmp_path / "report.json", err)
    assert not (tmp_path / "out").exists()  # refused before anything ran


@pytest.mark.parametrize("case", sorted(TOML_CASES))
def test_a_hostile_fleet_file_is_one_line_before_any_model_runs(case: str, tmp_path: Path, capfd) -> None:
    body, says = TOML_CASES[case]
    fleet = tmp_path / "fleet.toml"
    fleet.write_bytes(f"[models.a]\ncheckpoint = '{DEFAULT_CHECKPOINT}'\n".encode() + body)
    with deadline(60):
        code, out, err = run(capfd, "--fleet", fleet, "--out", tmp_path / "out", "-q", "--json", tmp_path / "report.json")
    assert code == 2
    one_line(err, str(fleet), says.replace("at tool", "at models"))
    error_report(tmp_path / "report.json", err)
    assert not (tmp_path / "out").exists()


def test_other_tools_tables_in_pyproject_are_theirs_to_judge(tmp_path: Path) -> None:
    """Only [tool.export-check] is held to the bounds on values: an inf, a 100-bit integer or deep dotted keys in
    another tool's table do not make export-check refuse the file."""
    from export_check.settings import find_settings

    path = tmp_path / "pyproject.toml"
    path.write_text("[tool.other]\nlimit = inf\nbig = 999999999999999999999999999999\n" + ".".join(["a"] * 100) + " = 1\n"
                    "[tool.export-check]\nbatch-size = 8\n")
    assert find_settings(None, path)["batch_size"] == 8
    path.write_text("[tool.other]\nlimit = 1\n[tool.export-check]\nbatch-size = 8\narch-kwargs = { scale = inf }\n")
    with pytest.raises(UsageError, match="the number at tool.export-check.arch-kwargs.scale is inf"):
        find_settings(None, path)


@pytest.mark.parametrize("flag", ["--config", "--fleet"])
def test_a_fifo_as_settings_or_fleet_file_is_refused_without_waiting(flag: str, tmp_path: Path, capfd) -> None:
    fifo = tmp_path / "settings.toml"
    os.mkfifo(fifo)  # opened for reading, it would block until a writer came
    argv = check_argv(tmp_path, "--config", fifo) if flag == "--config" else ["--fleet", fifo, "-q"]
    with deadline(30):
        code, _, err = run(capfd, *argv)
    assert code == 2
    one_line(err, str(fifo), "is a FIFO, not a regular file", "refused")


# --- cache sizes ------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["inf", "nan", "1e308", "-1"])
def test_cache_max_size_out_of_range_on_the_command_line_is_one_line(value: str, tmp_path: Path, capfd) -> None:
    code, _, err = run(capfd, *check_argv(tmp_path, "--cache-max-size", value))
    assert code == 2
    one_line(err, f"cache-max-size must be a number of GB from 0 to 1e+09, got {float(value):g}")
    error_report(tmp_path / "report.json", err)


@pytest.mark.parametrize("value", ["inf", "nan", "1e308"])
def test_cache_prune_refuses_a_size_out_of_range(value: str, tmp_path: Path, capfd) -> None:
    cache = tmp_path / "cache"
    code, out, err = run(capfd, "cache", "prune", "--cache-dir", cache, "--max-size", value)
    assert code == 2 and out == ""
    one_line(err, "--max-size must be a number of GB from 0 to 1e+09" if value == "1e308" else "--max-size must be a finite number >= 0")
    assert not cache.exists()


@pytest.mark.parametrize("command", ["info", "prune"])
def test_cache_commands_refuse_a_settings_file_with_an_endless_cache_size(command: str, tmp_path: Path, monkeypatch, capfd) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.export-check]\ncache-max-size = 1e308\n")
    code, _, err = run(capfd, "cache", command, "--cache-dir", tmp_path / "cache")
    assert code == 2
    one_line(err, "pyproject.toml: cache-max-size must be a number of GB from 0 to 1e+09, got 1e+308")


# --- merge ------------------------------------------------------------------------------------------

REPORT_CASES = {
    "deep": (b'{"schema": "export-check-report", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nests 100001 levels deep (at most 32 are read)"),
    "5000-digit-integer": (b'{"schema": "export-check-report", "n": ' + b"9" * 5000 + b"}", "holds an integer of 5,000 digits"),
    "1e999": (b'{"schema": "export-check-report", "x": 1e999}', "holds the number 1e999, too large for a float"),
    "nan": (b'{"schema": "export-check-report", "x": NaN}', "NaN is not valid here"),
    "non-utf8": (b'{"schema": "export-check-report\xff"}', "report is not UTF-8 text (byte 0xff"),
}


@pytest.mark.parametrize("case", sorted(REPORT_CASES))
def test_merge_of_a_hostile_json_file_is_one_line_and_writes_the_error_report(case: str, tmp_path: Path, capfd) -> None:
    from export_check.cache.secret import load_key
    from export_check.report.seal import seal

    data, says = REPORT_CASES[case]
    bad = tmp_path / "shard.json"
    # sealed with this user's own key, so that the bounded JSON reader is reached (an unsealed file is refused before
    # it is parsed): a writer of this user's gone wrong is held to the same bounds
    key = load_key(tmp_path / "cache")
    bad.write_bytes(data if case == "non-utf8" else seal(data.decode("utf-8"), key).encode("utf-8"))
    with deadline(60):
        code, out, err = run(capfd, "merge", bad, "--json", tmp_path / "merged.json", "--junit", tmp_path / "merged.xml")
    assert code == 2 and out == ""
    one_line(err, f"{bad}: {says}", "pass the JSON files written by export-check --json")
    error_report(tmp_path / "merged.json", err)
    assert "errors=\"1\"" in (tmp_path / "merged.xml").read_text()


def test_merge_of_a_fifo_is_refused_without_waiting(tmp_path: Path, capfd) -> None:
    fifo = tmp_path / "shard.json"
    os.mkfifo(fifo)
    with deadline(30):
        code, _, err = run(capfd, "merge", fifo)
    assert code == 2
    one_line(err, str(fifo), "is a FIFO, not a regular file")


# --- history -----------------------------------------------------------------------------------------

def _line(*rows: str) -> str:
    """One history line as --history writes it, with ``rows`` (JSON objects' text)."""
    return ('{"format": "export-check-history", "version": 1, "time": "t", "tool_version": "1", "checkpoint_sha256": "", '
            f'"golden_manifest_sha256": "", "rows": [{", ".join(rows)}]}}')


def _row(**fields: str) -> str:
    return "{" + ", ".join(['"name": "onnx"', '"status": "pass"', *(f'"{k}": {v}' for k, v in fields.items())]) + "}"


HISTORY_CASES = {
    "deep": ("[" * 100_000 + "]" * 100_000, "nests 100000 levels deep"),
    "5000-digit-size": (_line(_row(size_bytes="9" * 5000)), "holds an integer of 5,000 digits"),
    "400-digit-mae": (_line(_row(mae="9" * 400)), "holds an integer of 400 digits"),
    "20-digit-size": (_line(_row(size_bytes="9" * 20)), "the integer " + "9" * 20 + " needs 67 bits, outside the 64-bit range"),
    "1e999": (_line(_row(mae="1e999")), "holds the number 1e999, too large for a float"),
    "nan": (_line(_row(mae="NaN")), "NaN is not valid here"),
    "half-a-line": (_line()[:60], "not valid JSON"),
}


@pytest.mark.parametrize("case", sorted(HISTORY_CASES))
def test_a_corrupted_history_line_is_one_line_naming_it(case: str, tmp_path: Path, capfd) -> None:
    text, says = HISTORY_CASES[case]
    path = tmp_path / "history.jsonl"
    path.write_text(_line() + "\n" + text + "\n")
    for argv in (["history", path], ["history", path, "--json"], ["history", path, "--html", tmp_path / "trend.html"]):
        with deadline(60):
            code, out, err = run(capfd, *argv)
        assert code == 2 and out == ""
        one_line(err, f"{path}:2: {says}")
    assert not (tmp_path / "trend.html").exists()


def test_a_history_file_that_is_not_utf8_is_one_line(tmp_path: Path, capfd) -> None:
    path = tmp_path / "history.jsonl"
    path.write_bytes(_line().encode() + b"\n\xff\xfe\n")
    code, _, err = run(capfd, "history", path)
    assert code == 2
    one_line(err, str(path), "is not UTF-8 text (byte 0xff at offset")


def test_a_fifo_as_history_file_never_hangs_reading_or_appending(tmp_path: Path, capfd) -> None:
    fifo = tmp_path / "history.jsonl"
    os.mkfifo(fifo)
    with deadline(30):
        code, _, err = run(capfd, "history", fifo)
    assert code == 2
    one_line(err, str(fifo), "history file is a FIFO, not a regular file")
    with deadline(120):  # a whole check: the reports are written, the history line goes nowhere
        code, _, err = run(capfd, *check_argv(tmp_path, "--history", fifo))
    assert code == 2
    one_line(err, str(fifo), "is not a regular file; choose a --history path of a file")
    report = json.loads((tmp_path / "report.json").read_text())
    assert [r["name"] for r in report["rows"]] == ["eager", "torchscript-trace"]  # the run's own report, as written before the line


# --- golden samples that inflate, or that the model cannot take --------------------------------------


def _record_tokens(tmp_path: Path, capfd, samples: int = 4) -> tuple[Path, Path, list[str]]:
    """A format-2 golden set of ``TokenBag`` over ``samples`` .npz samples of 6 token ids."""
    checkpoint = save_state(seeded(_token_bag()), tmp_path / "tokens.pth")
    folder = tmp_path / "samples"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(samples):
        np.savez(folder / f"s{i}.npz", ids=rng.integers(0, 50, 6).astype(np.int64))
    code, _, err = run(capfd, "golden", "record", checkpoint, "--arch", f"{FAULTS}:TokenBag", "--inputs", folder, "--golden",
                       tmp_path / "golden", "--batch-size", "2")
    assert code == 0, err
    return checkpoint, tmp_path / "golden", [item.file for item in read_manifest(tmp_path / "golden").inputs]


def _token_bag():
    import fault_arches

    return fault_arches.TokenBag


def npz(compressed: bool = False, **arrays: np.ndarray) -> bytes:
    buf = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(buf, **arrays)
    return buf.getvalue()


def token_check(tmp_path: Path, checkpoint: Path, golden: Path, *extra: object) -> list[object]:
    return check_argv(tmp_path, "--junit", tmp_path / "report.xml", *extra, checkpoint=checkpoint, arch=f"{FAULTS}:TokenBag", golden=golden)


def test_samples_that_inflate_on_reading_fail_verify_and_check_before_anything_runs(tmp_path: Path, capfd) -> None:
    """Four ~70 KB samples, each inflating to 80 MB of zeros: refused from the zip headers' declared sizes,
    before anything is decompressed; verify lists all four, check stops with one line naming the first."""
    checkpoint, golden, files = _record_tokens(tmp_path, capfd)
    bomb = npz(compressed=True, ids=np.zeros(10 << 20, np.int64))  # 80 MiB of int64 zeros
    declared = declared_bytes(bomb, "s.npz", Path("s.npz"))
    assert len(bomb) < 200_000 and declared > (10 << 20) * 8 > SAMPLE_MAX_BYTES
    for rel in files:
        forge_golden_file(golden, rel, bomb)
    with deadline(60):
        code, out, _ = run(capfd, "golden", "verify", golden)
    assert code == 1 and "FAILED, 4 problem(s) in 4 inputs" in out and "OK" not in out
    assert out.count(f"declares {declared:,} bytes of arrays once decompressed, over the {SAMPLE_MAX_BYTES:,} bytes one sample") == 4
    with deadline(60):
        code, _, err = run(capfd, *token_check(tmp_path, checkpoint, golden))
    assert code == 2
    one_line(err, str(golden / files[0]), "over the 67,108,864 bytes one sample may hold", "replace it or re-record")
    error_report(tmp_path / "report.json", err)
    assert not (tmp_path / "out").exists()


def test_golden_record_refuses_an_input_sample_that_inflates(tmp_path: Path, capfd) -> None:
    checkpoint = save_state(seeded(_token_bag()), tmp_path / "tokens.pth")
    folder = tmp_path / "samples"
    folder.mkdir()
    np.savez(folder / "a.npz", ids=np.arange(6, dtype=np.int64))
    (folder / "b.npz").write_bytes(npz(compressed=True, ids=np.zeros(10 << 20, np.int64)))
    with deadline(60):
        code, _, err = run(capfd, "golden", "record", checkpoint, "--arch", f"{FAULTS}:TokenBag", "--inputs", folder, "--golden",
                           tmp_path / "golden")
    assert code == 2
    one_line(err, str(folder / "b.npz"), f"over the {SAMPLE_MAX_BYTES:,} bytes one sample may hold")
    assert not (tmp_path / "golden" / MANIFEST).exists()


def test_a_member_that_decompresses_past_its_declared_size_is_refused(tmp_path: Path, capfd) -> None:
    """A zip header declaring 48 bytes in front of a member that inflates to 8 MB: reading stops at the declared size + 1."""
    checkpoint, golden, files = _record_tokens(tmp_path, capfd)
    array = io.BytesIO()
    np.lib.format.write_array(array, np.zeros(1 << 20, np.int64))
    honest = io.BytesIO()
    with zipfile.ZipFile(honest, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("ids.npy", array.getvalue())
    honest_bytes, declared, small = honest.getvalue(), len(array.getvalue()), 48
    liar = bytearray(honest_bytes)
    for offset in (honest_bytes.find(b"PK\x03\x04") + 22, honest_bytes.find(b"PK\x01\x02") + 24):  # local and central header's size
        assert int.from_bytes(liar[offset:offset + 4], "little") == declared
        liar[offset:offset + 4] = small.to_bytes(4, "little")
    forge_golden_file(golden, files[1], bytes(liar))
    code, _, err = run(capfd, *token_check(tmp_path, checkpoint, golden))
    assert code == 2
    one_line(err, str(golden / files[1]), "member 'ids.npy'")
    error_report(tmp_path / "report.json", err)


def test_samples_over_the_sets_total_are_refused_naming_the_one_that_crosses_it(tmp_path: Path, capfd, monkeypatch) -> None:
    import export_check.golden.manifest as manifest

    checkpoint, golden, files = _record_tokens(tmp_path, capfd)
    each = declared_bytes((golden / files[0]).read_bytes(), files[0], golden / files[0])  # six int64 ids and the .npy header
    assert each == declared_bytes((golden / files[3]).read_bytes(), files[3], golden / files[3])
    monkeypatch.setattr(manifest, "GOLDEN_MAX_BYTES", 3 * each)  # the real bound, 4 GiB, scaled to this set
    code, out, _ = run(capfd, "golden", "verify", golden)
    assert code == 1 and "FAILED, 1 problem(s) in 4 inputs" in out and f"declare {4 * each:,} bytes of arrays" in out
    code, _, err = run(capfd, *token_check(tmp_path, checkpoint, golden))
    assert code == 2
    one_line(err, str(golden / files[3]), f"with it the samples declare {4 * each:,} bytes", f"over the {3 * each:,} bytes a golden set")


@pytest.mark.parametrize("ids, says", [
    (np.array([1, 2, 2**62, 4, 5, 6]), "IndexError: index out of range in self"),
    (np.array([1, 2, -1, 4, 5, 6]), "IndexError: index out of range in self"),
    (np.array(7), "IndexError: too many indices"),  # 0-d: one id, no sequence axis; mean(1) has no axis 1
])
def test_token_ids_the_model_cannot_take_name_the_sample_and_the_exception(ids: np.ndarray, says: str, tmp_path: Path, capfd) -> None:
    checkpoint, golden, files = _record_tokens(tmp_path, capfd)
    forge_golden_file(golden, files[2], npz(ids=ids.astype(np.int64)))
    with deadline(120):
        code, _, err = run(capfd, *token_check(tmp_path, checkpoint, golden))
    assert code == 2
    if ids.ndim == 0:  # a batch of its own (its shape differs from its neighbours'): named as that batch's input
        one_line(err, str(checkpoint), f"the eager model fails on the golden input {golden / files[2]}")
    else:
        one_line(err, str(checkpoint), f"the eager model fails on the golden input {golden / files[2]} ({says}",
                 "check that --arch and the golden set's preprocessing match the model")
    error_report(tmp_path / "report.json", err)
    assert "errors=\"1\"" in (tmp_path / "report.xml").read_text()


@pytest.mark.parametrize("shape", [(0,), (3, 0)])
def test_an_empty_sample_array_is_refused_naming_it(shape: tuple[int, ...], tmp_path: Path, capfd) -> None:
    checkpoint, golden, files = _record_tokens(tmp_path, capfd)
    forge_golden_file(golden, files[0], npz(ids=np.zeros(shape, np.int64)))
    code, out, _ = run(capfd, "golden", "verify", golden)
    assert code == 1 and f"input 'ids' holds no values (shape {shape})" in out
    code, _, err = run(capfd, *token_check(tmp_path, checkpoint, golden))
    assert code == 2
    one_line(err, str(golden / files[0]), f"input 'ids' holds no values (shape {shape}); replace it or re-record")
    error_report(tmp_path / "report.json", err)


# --- models that raise on the golden inputs (item 4) ---------------------------------------------------


def test_a_one_channel_model_on_an_rgb_golden_set_is_the_runs_one_line_error(tmp_path: Path, capfd) -> None:
    from arches import TinyNet

    checkpoint = save_state(seeded(TinyNet, in_channels=1), tmp_path / "gray.pth")
    first = read_manifest(DEFAULT_GOLDEN).inputs[0].file
    code, out, err = run(capfd, *check_argv(tmp_path, "--arch-kwargs", '{"in_channels": 1}', "--junit", tmp_path / "report.xml",
                                            checkpoint=checkpoint, arch=TINY))
    assert code == 2 and out == ""
    one_line(err, f"{checkpoint}: the eager model fails on the golden input {DEFAULT_GOLDEN / first} (RuntimeError: ",
             "to have 1 channels, but got 3 channels instead", "check that --arch")
    doc = error_report(tmp_path / "report.json", err)
    assert doc["error"]["type"] == "ArchitectureError" and doc["rows"] == []
    junit = (tmp_path / "report.xml").read_text()
    assert "errors=\"1\"" in junit and "to have 1 channels" in junit


def test_a_dict_returning_model_against_a_single_output_golden_set_is_one_line(tmp_path: Path, capfd) -> None:
    import fault_arches

    checkpoint = save_state(seeded(fault_arches.DictOfLogits), tmp_path / "dict.pth")
    code, _, err = run(capfd, *check_argv(tmp_path, "--junit", tmp_path / "report.xml", checkpoint=checkpoint, arch=f"{FAULTS}:DictOfLogits"))
    assert code == 2
    one_line(err, f"{checkpoint}: the eager model returned dict; export-check compares one logits tensor (on the golden input {DEFAULT_GOLDEN}",
             "the golden set holds outputs logits", "re-record the golden set")
    error_report(tmp_path / "report.json", err)
    assert "errors=\"1\"" in (tmp_path / "report.xml").read_text()


def test_an_artifact_that_raises_on_the_golden_inputs_is_that_rows_error(tmp_path: Path, digit_images: Path, capfd) -> None:
    """The trace bakes the example's batch size (16) in; the set's last batch holds 8 (24 = 16 + 8): the
    artifact raises there, eager does not. That row fails, its reason naming the inputs and the exception;
    the run goes on (exit 1, not 2) and writes its reports."""
    import fault_arches

    checkpoint = save_state(seeded(fault_arches.BakedBatchSize), tmp_path / "baked.pth")
    arch = f"{FAULTS}:BakedBatchSize"
    code, _, err = run(capfd, "golden", "record", checkpoint, "--arch", arch, "--inputs", digit_images, "--golden", tmp_path / "golden",
                       "--size", "32", "--mode", "RGB")
    assert code == 0, err
    code, out, err = run(capfd, *check_argv(tmp_path, "--junit", tmp_path / "report.xml", checkpoint=checkpoint, arch=arch,
                                            golden=tmp_path / "golden"))
    assert code == 1 and "Traceback" not in err
    doc = json.loads((tmp_path / "report.json").read_text())
    rows = {r["name"]: r for r in doc["rows"]}
    assert rows["eager"]["status"] == "pass" and rows["torchscript-trace"]["status"] == "fail"
    reason = rows["torchscript-trace"]["reasons"][0]
    assert reason.startswith("running failed at inputs 16..23: RuntimeError: shape '[16, 16]' is invalid"), reason
    assert reason.endswith("(golden inputs 0016.png to 0023.png)"), reason  # the files, named as the set names them
    assert "failures=\"1\"" in (tmp_path / "report.xml").read_text()


def test_a_failing_onnxruntime_session_logs_nothing_coloured_into_a_piped_stderr(tmp_path: Path, digit_images: Path) -> None:
    """issue 25 item 10: onnxruntime's C++ logger wrote its own coloured error line
    (``\\x1b[1;31m... [E:onnxruntime:, sequential_executor.cc ...] Non-zero status code ...\\x1b[m``) to a piped
    stderr when the onnx file, with the batch size baked in, fails on the set's last batch. The exception carries
    the error to the row's one-line reason; stderr stays free of escape codes and native log lines."""
    import subprocess
    import sys

    import fault_arches

    checkpoint = save_state(seeded(fault_arches.BakedBatchSize), tmp_path / "baked.pth")
    arch = f"{FAULTS}:BakedBatchSize"
    assert main([str(a) for a in ("golden", "record", checkpoint, "--arch", arch, "--inputs", digit_images, "--golden",
                                  tmp_path / "golden", "--size", "32", "--mode", "RGB", "-q")]) == 0
    argv = [str(a) for a in check_argv(tmp_path, checkpoint=checkpoint, arch=arch, golden=tmp_path / "golden")]
    argv[argv.index("torchscript-trace")] = "onnx"
    proc = subprocess.run([sys.executable, "-m", "export_check", *argv], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert "\x1b" not in proc.stderr and "onnxruntime:" not in proc.stderr, proc.stderr
    row = {r["name"]: r for r in json.loads((tmp_path / "report.json").read_text())["rows"]}["onnx"]
    reason = row["reasons"][0]
    assert row["status"] == "fail" and reason.startswith("running failed at inputs 16..23: ") and "\n" not in reason, reason
    assert "\x1b" not in json.dumps(row), row


# --- outputs never lost or judged on nothing (item 5) ------------------------------------------------


def test_outputs_whose_flattened_names_collide_are_refused_at_record(tmp_path: Path, capfd) -> None:
    import fault_arches

    checkpoint = save_state(seeded(fault_arches.CollidingNames), tmp_path / "clash.pth")
    (tmp_path / "vectors").mkdir()
    for i in range(3):
        np.save(tmp_path / "vectors" / f"v{i}.npy", np.full(12, i, np.float32))
    code, _, err = run(capfd, "golden", "record", checkpoint, "--arch", f"{FAULTS}:CollidingNames", "--inputs", tmp_path / "vectors",
                       "--golden", tmp_path / "golden")
    assert code == 2
    one_line(err, str(checkpoint), "returned two outputs that are both named 'a.b' once nested keys are joined with dots", "rename one")
    assert not (tmp_path / "golden" / MANIFEST).exists()


def test_flattening_refuses_every_kind_of_collision_and_keeps_distinct_names() -> None:
    t = torch.zeros(1)
    for clash in ({"a.b": t, "a": {"b": t}}, {"a": {"b": t}, "a.b": t}, {"x": (t, t), "x.0": t}, {1: t, "1": t}):
        with pytest.raises(ArtifactError, match="both named"):
            flatten_outputs(clash)
    assert list(flatten_outputs({"a": {"b": t}, "a_b": t, "x": (t, t)})) == ["a.b", "a_b", "x.0", "x.1"]


@pytest.mark.parametrize("arch, says", [
    ("NothingOut", "the model's output has no values (shape (24, 0))"),
    ("EmptyOutput", "output output_1 has no values (shape (16, 0))"),
])
def test_an_output_without_values_is_refused_at_record(arch: str, says: str, tmp_path: Path, digit_images: Path, capfd) -> None:
    import fault_arches

    checkpoint = save_state(seeded(getattr(fault_arches, arch)), tmp_path / "m.pth")
    images = digit_images  # 24 images: a first batch of 16
    code, _, err = run(capfd, "golden", "record", checkpoint, "--arch", f"{FAULTS}:{arch}", "--inputs", images, "--golden", tmp_path / "golden",
                       "--size", "32", "--mode", "RGB")
    assert code == 2
    one_line(err, f"{checkpoint.name if arch == 'NothingOut' else checkpoint}: {says}", "a comparison over nothing would pass")
    assert not (tmp_path / "golden" / MANIFEST).exists()


def test_a_golden_output_without_values_is_the_runs_error_not_a_pass(tmp_path: Path, digit_images: Path, capfd, monkeypatch) -> None:
    """Recorded not compared (allowed), then a manifest edited to compare it: check refuses to judge it."""
    import fault_arches

    monkeypatch.chdir(tmp_path)
    checkpoint = save_state(seeded(fault_arches.EmptyOutput), tmp_path / "m.pth")
    (tmp_path / "export-check.toml").write_text('[outputs.output_1]\ncompare = false\n')
    arch = f"{FAULTS}:EmptyOutput"
    code, _, err = run(capfd, "golden", "record", checkpoint, "--arch", arch, "--inputs", digit_images, "--golden", tmp_path / "golden",
                       "--size", "32", "--mode", "RGB")
    assert code == 0, err
    manifest = json.loads((tmp_path / "golden" / MANIFEST).read_text())
    assert [o["compared"] for o in manifest["signature"]["outputs"]] == [True, False]
    manifest["signature"]["outputs"][1]["compared"] = True
    (tmp_path / "golden" / MANIFEST).write_text(json.dumps(manifest))
    (tmp_path / "export-check.toml").write_text("")
    code, out, err = run(capfd, *check_argv(tmp_path, checkpoint=checkpoint, arch=arch, golden=tmp_path / "golden"))
    assert code == 2 and "PASS" not in out
    one_line(err, f"{tmp_path / 'golden' / MANIFEST}: output output_1 holds no values (shape (0,) per sample)", "would pass")
    error_report(tmp_path / "report.json", err)


# --- the parsers under random input ---------------------------------------------------------------------

_FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@_FUZZ
@given(st.one_of(
    st.binary(max_size=400),
    st.builds(lambda depth, opener, value: ("x = " + opener * depth + value + {"[": "]", "{a=": "}"}[opener] * depth).encode(),
              st.integers(0, 2000), st.sampled_from(["[", "{a="]), st.sampled_from(["1", "nan", "inf", "9" * 30, "'s'"])),
    st.builds(lambda keys, value: (".".join(keys) + " = " + value).encode(), st.lists(st.sampled_from(["a", "b", "'c.d'"]), min_size=1, max_size=60),
              st.sampled_from(["1", "-inf", "1e400", "-" + "9" * 5000, "0x7fffffffffffffff", "[[[]]]"])),
))
def test_fuzzed_toml_loads_within_bounds_or_fails_with_one_usage_error(tmp_path_factory, data: bytes) -> None:
    path = tmp_path_factory.getbasetemp() / "fuzz.toml"
    path.write_bytes(data)
    try:
        loaded = parsing.load_toml(path, "settings file", "fix the file")
    except UsageError as exc:
        assert "\n" not in str(exc) and str(exc).startswith(f"{path}: ")
        return
    parsing.check_values(loaded, path, "fix")  # what loaded is bounded: deep, huge or non-finite would have raised


@_FUZZ
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3), max_leaves=30),
       st.integers(0, 60), st.sampled_from(["", "NaN", "1e999", "-Infinity", "9" * 40]))
def test_fuzzed_json_parses_within_bounds_or_fails_with_one_usage_error(value, depth: int, tail: str) -> None:
    text = "[" * depth + json.dumps(value) + (", " + tail if tail else "") + "]" * depth
    try:
        loaded = parsing.load_json(text, "r.json")
    except UsageError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("r.json: ")
        return
    assert parsing.json_depth(text) <= parsing.MAX_DEPTH
    parsing.check_values(loaded, "r.json", "fix")


@_FUZZ
@given(st.text(max_size=300) | st.builds(lambda mae, size: _line(_row(mae=mae, size_bytes=size)),
                                         st.sampled_from(["1", "1e999", "NaN", "-0.5", "9" * 25, "null"]),
                                         st.sampled_from(["1", "-1", "9" * 20, "null", "1.5"])))
def test_fuzzed_history_lines_parse_or_fail_with_one_history_error(text: str) -> None:
    try:
        run_ = parse_line(text, "h.jsonl", 3)
    except HistoryError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("h.jsonl:3: ")
        return
    for row in run_.rows:
        assert row.mae is None or np.isfinite(row.mae)
        assert row.size_bytes is None or 0 <= row.size_bytes < 2**63


def test_a_bundle_is_never_written_through_a_link_planted_in_out(tmp_path: Path, monkeypatch) -> None:
    """Issue 47: ``--bundle OUT/...`` follows no link in --out: a linked folder on the way, or a link at the
    bundle's own name, is one line and the user's files outside keep their bytes; a path outside --out is the
    user's, written as before."""
    import hashlib

    from export_check.bundle import BundledArtifact, write_bundle
    from export_check.cache.secret import KEY_ENV

    monkeypatch.setenv(KEY_ENV, str(tmp_path / "lab.key"))
    out, home = tmp_path / "out", tmp_path / "home"
    out.mkdir(), home.mkdir()
    (home / "b.bundle").write_bytes(b"the user's own bundle\n")
    (out / "bundles").symlink_to(home)
    (out / "b.bundle").symlink_to(home / "b.bundle")
    artifact = tmp_path / "model.onnx"
    artifact.write_bytes(b"an onnx file's bytes")
    entry = BundledArtifact(name="onnx", family="float", file="artifacts/onnx.onnx", sha256=hashlib.sha256(b"an onnx file's bytes").hexdigest(),
                            size_bytes=20, details=(), build_status="pass", build_metrics=None)

    def write(path: Path) -> int:
        return write_bundle(path, {"samples": 4}, [(entry, artifact)], iter([(0, {"input": np.zeros((4, 3), np.float32)},
                                                                                 {"logits": np.zeros((4, 2))})]), tmp_path / "cache", out_dir=out)

    for path, line in ((out / "bundles" / "b.bundle", f"--bundle {out / 'bundles'} is a symbolic link, not a folder export-check made"),
                       (out / "b.bundle", f"--bundle {out / 'b.bundle'}: is a symbolic link inside {out} that export-check did not make")):
        with pytest.raises(UsageError) as refused:
            write(path)
        assert str(refused.value).startswith(line) and "\n" not in str(refused.value)
        assert (home / "b.bundle").read_bytes() == b"the user's own bundle\n" and sorted(p.name for p in home.iterdir()) == ["b.bundle"]
    assert write(out / "kept" / "b.bundle") == (out / "kept" / "b.bundle").stat().st_size  # a folder of its own inside --out: written
    assert zipfile.is_zipfile(out / "kept" / "b.bundle")
