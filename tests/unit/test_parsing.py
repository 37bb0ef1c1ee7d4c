"""parsing.py: untrusted JSON and TOML is read within its bounds, and every refusal is one line naming the file."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from export_check.errors import GoldenError, UsageError
from export_check.parsing import (
    JSON_MAX_INT_DIGITS,
    MAX_DEPTH,
    TOML_MAX_BYTES,
    check_values,
    json_depth,
    load_json,
    load_toml,
    read_json,
    read_text,
)

FIX = "fix it"


def one_line(exc: pytest.ExceptionInfo[BaseException], shown: object) -> str:
    text = str(exc.value)
    assert text.startswith(f"{shown}: ") and "\n" not in text and text.endswith(FIX), text
    return text


@pytest.mark.parametrize(("text", "depth"), [
    ("", 0), ("1", 0), ("[]", 1), ('{"a": [1, {"b": []}]}', 4), ('["[[[[", "}}}"]', 1), (r'["\"[[["]', 1), ("[[]][[[]]]", 3),
])
def test_json_depth_counts_brackets_outside_strings(text: str, depth: int) -> None:
    assert json_depth(text) == depth


def test_load_json_reads_what_json_reads_within_the_bounds() -> None:
    text = '{"a": [1, 2.5, -3e2, true, null, "x"], "n": -9223372036854775808}'
    assert load_json(text, "r.json") == json.loads(text)


@pytest.mark.parametrize(("text", "says"), [
    ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), f"nests {MAX_DEPTH + 1} levels deep (at most {MAX_DEPTH} are read)"),
    ("[" + "9" * (JSON_MAX_INT_DIGITS + 1) + "]", f"an integer of {JSON_MAX_INT_DIGITS + 1} digits"),
    ("[1e999]", "the number 1e999, too large for a float"),
    ("[NaN]", "NaN is not valid here"),
    ("[-Infinity]", "-Infinity is not valid here"),
    ('{"a": }', "not valid JSON (Expecting value at line 1)"),
])
def test_load_json_refuses_with_one_line(text: str, says: str) -> None:
    with pytest.raises(UsageError) as info:
        load_json(text, Path("r.json"), FIX)
    assert says in one_line(info, "r.json")


def test_load_json_deep_at_the_limit_is_read_and_the_error_class_is_the_callers() -> None:
    assert load_json("[" * MAX_DEPTH + "]" * MAX_DEPTH, "r.json") is not None
    with pytest.raises(GoldenError):
        load_json("[", "m.json", FIX, GoldenError)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet='[]{}",:0123456789.eE-+ tnrufalsNIy\\', max_size=60))
def test_any_text_parses_or_is_one_usage_error_line(text: str) -> None:
    try:
        load_json(text, "r.json", FIX)
    except UsageError as exc:
        assert str(exc).startswith("r.json: ") and "\n" not in str(exc)


def test_read_text_refuses_what_is_not_a_small_utf8_regular_file(tmp_path: Path) -> None:
    good = tmp_path / "ok.json"
    good.write_text('{"a": 1}')
    assert read_text(good, 8, "report", FIX) == '{"a": 1}'
    assert read_json(good, 8, "report", FIX) == {"a": 1}
    cases = [
        (tmp_path / "missing.json", "report not found"),
        (tmp_path, "report is a directory"),
        (good, "more than the 7 allowed"),
    ]
    bad = tmp_path / "latin1.json"
    bad.write_bytes(b'{"a": "\xe9"}')
    cases.append((bad, "report is not UTF-8 text (byte 0xe9 at offset 7)"))
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    cases.append((fifo, "FIFO"))  # refused, not waited on
    for path, says in cases:
        limit = 7 if path == good else 1 << 20
        with pytest.raises(UsageError) as info:
            read_text(path, limit, "report", FIX)
        assert says in one_line(info, path), path


def write_toml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "settings.toml"
    path.write_text(text)
    return path


def test_load_toml_checks_only_its_own_table(tmp_path: Path) -> None:
    path = write_toml(tmp_path, '[tool.other]\nx = inf\n[tool.export-check]\nbatch_size = 4\n')
    assert load_toml(path, "settings file", FIX, ours=("tool", "export-check"))["tool"]["export-check"] == {"batch_size": 4}
    with pytest.raises(UsageError) as info:
        load_toml(path, "settings file", FIX)
    assert "the number at tool.other.x is inf, not a finite number" in one_line(info, path)


@pytest.mark.parametrize(("text", "says"), [
    ("a = ", "not valid TOML"),
    ("a = " + "9" * 30, "the integer at a needs 100 bits, outside the 64-bit range"),
    ("a = " + "9" * 5000, "an integer of over 4,300 digits"),
    (".".join(f"k{i}" for i in range(MAX_DEPTH + 1)) + " = 1", f"nests {MAX_DEPTH + 1} levels deep at k0.k1"),
    ("a = " + "[" * 2000 + "]" * 2000, "too deeply to read"),
])
def test_load_toml_refuses_with_one_line(tmp_path: Path, text: str, says: str) -> None:
    path = write_toml(tmp_path, text)
    with pytest.raises(UsageError) as info:
        load_toml(path, "settings file", FIX)
    assert says in one_line(info, path)


def test_a_toml_file_over_the_limit_is_refused_unread(tmp_path: Path) -> None:
    path = write_toml(tmp_path, "# " + "x" * TOML_MAX_BYTES + "\n")
    with pytest.raises(UsageError, match=f"more than the {TOML_MAX_BYTES:,} allowed|more than the {TOML_MAX_BYTES} allowed"):
        load_toml(path, "settings file", FIX)


def test_check_values_names_the_key_of_a_list_item_and_lets_bools_and_edge_ints_through() -> None:
    check_values({"a": [True, -(1 << 63), (1 << 63) - 1, 1.5]}, "f", FIX)
    with pytest.raises(UsageError) as info:
        check_values({"a": [0, {"b": float("nan")}]}, "f", FIX)
    assert "the number at a[1].b is nan" in one_line(info, "f")
    with pytest.raises(UsageError, match=r"the integer at a\[2\] needs 64 bits"):
        check_values({"a": [0, 0, 1 << 63]}, "f", FIX)
