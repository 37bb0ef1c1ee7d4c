"""cache/prune.py: the cache kept under its size limit, least recently used first, never an entry in use."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from export_check.cache.prune import GB, evict, hold, parse_gb, prune, shown_size, touch, usage


def entry(root: Path, n: int, size: int, last_used: float) -> Path:
    folder = root / "v3" / f"{n:02x}" / (f"{n:02x}" * 32)
    folder.mkdir(parents=True)
    (folder / "artifact.bin").write_bytes(b"x" * size)
    (folder / "meta.json").write_bytes(b"")
    os.utime(folder, (last_used, last_used))
    return folder


@pytest.fixture
def cache(tmp_path: Path) -> tuple[Path, list[Path]]:
    root = tmp_path / "cache"
    # entry 1 was used last, entry 2 first
    return root, [entry(root, 0, 100, 2000.0), entry(root, 1, 200, 3000.0), entry(root, 2, 300, 1000.0)]


def test_usage_lists_entries_least_recently_used_first_and_ignores_what_is_no_entry(cache, tmp_path: Path) -> None:
    root, entries = cache
    (root / "v3" / "zz").mkdir()
    (root / "v3" / "00" / "not-an-entry").mkdir()
    (root / "v3" / "00" / ("ef" * 32)).symlink_to(tmp_path)  # a planted link is no entry
    (root / "notes.txt").write_text("mine")
    found = usage(root)
    assert [e.path for e in found.entries] == [entries[2], entries[0], entries[1]]
    assert [e.size for e in found.entries] == [300, 100, 200] and found.size == 600
    assert usage(tmp_path / "absent").entries == ()


def test_prune_removes_the_oldest_until_under_the_limit(cache) -> None:
    root, entries = cache
    done = prune(root, 250)
    assert done is not None and (done.removed, done.freed, done.in_use, done.limit) == (2, 400, 0, 250)
    assert [e.path for e in done.left.entries] == [entries[1]] and not entries[2].exists() and not entries[0].exists()


def test_no_limit_removes_nothing_and_zero_removes_everything(cache) -> None:
    root, entries = cache
    kept = prune(root, None)
    assert kept is not None and kept.removed == 0 and kept.left.size == 600
    gone = prune(root, 0)
    assert gone is not None and gone.removed == 3 and gone.left.entries == () and (root / "v3").is_dir()


def test_an_entry_a_run_holds_is_kept_and_counted(cache) -> None:
    root, entries = cache
    fd = os.open(entries[2], os.O_RDONLY | os.O_DIRECTORY)
    try:
        hold(fd)
        done = prune(root, 250)
    finally:
        os.close(fd)
    assert done is not None and done.in_use == 1 and entries[2].exists()
    assert not entries[0].exists() and not entries[1].exists() and done.left.size == 300


def test_evict_says_in_one_line_what_went_and_what_another_run_holds(cache) -> None:
    root, entries = cache
    assert evict(root, None) is None and evict(root, 600) is None and len(usage(root).entries) == 3  # no limit, or under it
    fd = os.open(entries[2], os.O_RDONLY | os.O_DIRECTORY)
    try:
        hold(fd)  # the least recently used entry is another run's: it stays, the next two go
        line = evict(root, 100)
    finally:
        os.close(fd)
    assert line == (f"cache: evicted 2 least recently used entries (300 B) to keep {root} under 100 B; "
                    "1 over the limit are in use by another run and stay")
    assert entries[2].exists() and not entries[0].exists() and not entries[1].exists()


def test_removal_follows_no_link_and_leaves_a_folder_it_did_not_make(cache, tmp_path: Path) -> None:
    root, entries = cache
    precious = tmp_path / "precious.txt"
    precious.write_text("keep")
    (entries[2] / "link").symlink_to(precious)
    (entries[0] / "sub").mkdir()
    done = prune(root, 0)
    assert precious.read_text() == "keep"
    assert done is not None and not entries[2].exists() and entries[0].exists() and os.listdir(entries[0]) == ["sub"]


def test_another_evictor_holding_the_root_makes_prune_return_none(cache) -> None:
    root, _ = cache
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert prune(root, 0, wait=0.1) is None
    finally:
        os.close(fd)
    assert len(usage(root).entries) == 3


def test_abandoned_partials_are_swept_and_a_fresh_one_is_not(cache) -> None:
    root, entries = cache
    old, fresh = entries[0] / ".artifact.1234.partial", entries[1] / ".artifact.5678.partial"
    old.write_bytes(b"half")
    fresh.write_bytes(b"half")
    os.utime(old, (1.0, 1.0))
    assert usage(root).size == 608  # usage only reads
    done = prune(root, None)  # pruning sweeps each entry before it measures it
    assert done is not None and done.left.size == 604 and not old.exists() and fresh.exists()


def test_touch_marks_an_entry_used_now(cache) -> None:
    root, entries = cache
    fd = os.open(entries[2], os.O_RDONLY | os.O_DIRECTORY)
    try:
        touch(fd)
    finally:
        os.close(fd)
    assert usage(root).entries[-1].path == entries[2]


@pytest.mark.parametrize(("gb", "limit"), [(5.0, 5 * GB), (0.5, GB // 2), (0, None), (1e-9, 1)])
def test_parse_gb(gb: float, limit: int | None) -> None:
    assert parse_gb(gb) == limit


@pytest.mark.parametrize(("size", "text"), [(0, "0 B"), (999, "999 B"), (1000, "1 kB"), (12_345, "12.3 kB"), (2_500_000, "2.5 MB"),
                                            (5 * GB, "5.00 GB"), (1234 * GB, "1234.00 GB")])
def test_shown_size(size: int, text: str) -> None:
    assert shown_size(size) == text
