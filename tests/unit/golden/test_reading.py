"""golden/reading.py: a file the user points at and JSON are read within their bounds; every refusal is one GoldenError line.
(A set's own files read: tests/unit/golden/test_goldenset.py; their bytes decoded within theirs: tests/unit/golden/test_inputs.py.)"""

from __future__ import annotations

from pathlib import Path

from conftest import golden_refusal as refused
from export_check.golden.reading import load_json, read_user_file

SHOWN = Path("golden/x")


def test_read_user_file_follows_a_link_the_user_gave_but_reads_only_regular_files(tmp_path: Path) -> None:
    (tmp_path / "img.png").write_bytes(b"png")
    (tmp_path / "link.png").symlink_to(tmp_path / "img.png")
    assert read_user_file(tmp_path / "link.png", 10, "input") == b"png"
    assert "input disappeared while recording" in refused(read_user_file, tmp_path / "gone.png", 10, "input")
    assert "input is a directory, not a regular file" in refused(read_user_file, tmp_path, 10, "input")


def test_load_json_is_bounded_and_a_golden_error() -> None:
    assert load_json('{"version": 2}', SHOWN) == {"version": 2}
    assert "restore it or re-record the golden set" in refused(load_json, "[" * 40 + "]" * 40, SHOWN)
