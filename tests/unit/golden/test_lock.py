"""golden/lock.py: one golden writer at a time, a folder the lock made is removed again when the block fails."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from export_check.errors import GoldenError
from export_check.golden.lock import LOCK_NAME, golden_lock


def test_a_second_writer_waits_then_fails_with_one_line(tmp_path: Path) -> None:
    golden = tmp_path / "golden"
    with golden_lock(golden):
        started = time.monotonic()
        with pytest.raises(GoldenError) as info, golden_lock(golden, timeout=0.2):
            pass
        assert time.monotonic() - started >= 0.2
    assert "another export-check has been writing this golden set for over 0 s" in str(info.value)
    assert str(info.value).startswith(str(golden)) and "\n" not in str(info.value)
    with golden_lock(golden, timeout=0):  # released: taken at once
        pass
    assert list(golden.iterdir()) == []  # no lock file left behind
    assert not (golden / LOCK_NAME).exists()


def test_writers_are_serialised(tmp_path: Path) -> None:
    golden = tmp_path / "golden"
    inside, overlaps = [0], []

    def writer() -> None:
        with golden_lock(golden, timeout=10):
            inside[0] += 1
            overlaps.append(inside[0])
            time.sleep(0.02)
            inside[0] -= 1

    threads = [threading.Thread(target=writer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlaps == [1, 1, 1, 1]


def test_a_failed_first_write_removes_the_folder_it_created(tmp_path: Path) -> None:
    golden = tmp_path / "new" / "golden"
    with pytest.raises(RuntimeError), golden_lock(golden):
        (golden / "inputs").mkdir()
        raise RuntimeError("record failed")
    assert not golden.exists()


def test_a_failed_write_keeps_a_folder_that_existed_or_holds_files(tmp_path: Path) -> None:
    existing = tmp_path / "existing"
    existing.mkdir()
    with pytest.raises(RuntimeError), golden_lock(existing):
        raise RuntimeError
    assert existing.is_dir()
    made = tmp_path / "made"
    with pytest.raises(RuntimeError), golden_lock(made):
        (made / "manifest.json").write_text("{}")
        raise RuntimeError
    assert (made / "manifest.json").is_file()


def test_a_golden_path_that_cannot_be_a_folder_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(GoldenError, match="cannot create or open the golden folder"), golden_lock(tmp_path / "file" / "golden"):
        pass
