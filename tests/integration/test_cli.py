from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from export_check.cli import main


def test_help_imports_no_torch_numpy_or_onnx() -> None:
    code = (
        "import sys, contextlib, io\n"
        "from export_check.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "    try:\n        main(['--help'])\n    except SystemExit as e:\n        assert e.code == 0\n"
        "assert 'exit codes' in out.getvalue() and 'onnx-int8-dynamic' in out.getvalue()\n"
        "heavy = sorted(m for m in ('torch', 'numpy', 'onnx', 'onnxruntime', 'PIL') if m in sys.modules)\n"
        "print(heavy)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize("argv", [["check", "CKPT", "--batch-size", "0"], ["check", "missing.pth"]])
def test_a_usage_error_without_reports_imports_no_torch_numpy_or_onnx(tmp_path: Path, argv) -> None:
    """benchmarks/run.py times these (< 0.3 s); writing the error reports of exit 2 must not make them import numpy."""
    (tmp_path / "CKPT").write_bytes(b"not read before the arguments are checked")
    code = (
        "import sys, contextlib, io\n"
        "from export_check.cli import main\n"
        "with contextlib.redirect_stderr(io.StringIO()) as err:\n"
        f"    assert main({argv!r}) == 2\n"
        "assert err.getvalue().startswith('export-check: error: ')\n"
        "print(sorted(m for m in ('torch', 'numpy', 'onnx', 'onnxruntime', 'PIL') if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["missing.pth"], "missing.pth: checkpoint not found"),
        (["check"], "required: checkpoint"),
        (["CKPT", "--batch-size", "many"], "invalid int value"),
        (["CKPT", "--arch-kwargs", "{oops"], "not valid JSON"),
        (["CKPT", "--arch", "m:F", "--artifacts", "onnx,tflite"], "unknown artifact kind(s) tflite"),
        (["CKPT", "--arch", "m:F", "--int8-min-top1", "1.5"], "fraction in [0, 1]"),
        (["CKPT", "--arch", "m:F", "--batch-size", "0"], "batch size must be an integer >= 1"),
        (["CKPT", "--arch", "m:F", "--jobs", "3"], "argument --jobs: invalid choice: 3 (choose from 1, 2)"),
        (["CKPT", "--arch", "m:F", "--jobs", "two"], "argument --jobs: invalid int value: 'two'"),
        (["CKPT", "--arch", "m:F", "--build-timeout", "-1"], "build timeout must be a finite number >= 0, got -1.0"),
        (["CKPT", "--arch", "m:F", "--build-timeout", "nan"], "build timeout must be a finite number >= 0, got nan"),
        # a NUL byte in a path (found by the fuzzer below; os calls raise ValueError on one): refused by the parser
        (["CKPT", "--arch", "m:F", "--json", "r\x00.json"], "argument --json: 'r\\x00.json' holds a NUL byte, which no file name can"),
        (["CKPT\x00", "--json", "r.json", "--batch-size", "x"], "argument checkpoint: 'CKPT\\x00' holds a NUL byte"),
        (["golden", "approve", "CKPT", "--arch", "m:F", "--golden", "g\x00"], "argument --golden: 'g\\x00' holds a NUL byte"),
        (["history", "h\x00.jsonl"], "argument PATH: 'h\\x00.jsonl' holds a NUL byte"),
        (["cache", "prune", "--cache-dir", "c\x00"], "argument --cache-dir: 'c\\x00' holds a NUL byte"),
    ],
)
def test_bad_usage_is_one_line_and_exit_2(tmp_path: Path, monkeypatch, capsys, argv, message) -> None:
    monkeypatch.chdir(tmp_path)  # no pyproject settings apply
    (tmp_path / "CKPT").write_bytes(b"not checked before the arguments")
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 2
    assert captured.err.startswith("export-check: error: ") and captured.err.count("\n") == 1
    assert message in captured.err
    assert "Traceback" not in captured.err


def test_verify_of_a_missing_golden_set_is_a_finding_on_stdout_and_exit_1(tmp_path: Path, monkeypatch, capsys) -> None:
    """Not a usage error: verify's verdict on a golden set that is not there is BROKEN, exit 1, on stdout."""
    monkeypatch.chdir(tmp_path)
    missing = tmp_path / "nonexistent" / "golden"
    code = main(["golden", "verify", str(missing)])
    captured = capsys.readouterr()
    assert code == 1
    assert captured.out.splitlines() == [
        f"golden set {missing}: BROKEN",
        f"  {missing}: golden set not found; pass --golden DIR or record one with `export-check golden record`",
    ]
    assert captured.err == ""


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(argv=st.lists(st.sampled_from(["check", "golden", "record", "verify", "approve", "--arch", "--json", "--out",
                                      "--batch-size", "--threads", "--jobs", "--build-timeout", "--artifacts", "--max-mae",
                                      "--int8-min-top1",
                                      "--arch-kwargs", "-q", "--opset", "nan", "-1", "1e-5", "{}", "[]", "onnx",
                                      "/nonexistent.pth", "", "--size", "x", "a:b"]) | st.text(max_size=12), max_size=6))
def test_fuzzed_arguments_never_traceback(argv: list[str], capsys, monkeypatch) -> None:
    # each example in a folder of its own: a fuzzed `--json onnx` writes its error report to ./onnx
    with tempfile.TemporaryDirectory() as folder:
        monkeypatch.chdir(folder)
        try:
            code = main(argv)
        except SystemExit as exc:  # --help / --version
            assert exc.code == 0
            return
        finally:
            monkeypatch.undo()
    captured = capsys.readouterr()  # read per example, so each sees only its own output
    assert code in (1, 2), (argv, captured)
    assert "Traceback" not in captured.err
