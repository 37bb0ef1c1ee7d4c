"""The cache bounded (issue 16.7): every hit records its use, a store evicts the least recently used
entries to the limit, an entry another process is using is never evicted, eviction follows no link,
and `export-check cache info|prune|clear`. Sizes are counted here from the files on disk."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import DEFAULT_ARCH, DEFAULT_CHECKPOINT, DEFAULT_GOLDEN
from export_check.cache import prune as cache_prune
from export_check.cache.runs import open_cache
from export_check.cache.secret import CacheKey
from export_check.cache.store import EAGER, ArtifactCache
from export_check.cli import main
from export_check.config import RunConfig
from export_check.files import sha256_file
from export_check.run.pipeline import run_check

KINDS = ("torchscript-trace", "onnx")


def on_disk(root: Path) -> dict[Path, int]:
    """Every entry folder under ``root`` and the bytes of its regular files, counted by walking the tree."""
    found = {}
    for layout in root.glob("v*"):
        for entry in layout.glob("*/*"):
            if entry.is_dir() and not entry.is_symlink():
                found[entry] = sum(f.lstat().st_size for f in entry.iterdir() if f.is_file() and not f.is_symlink())
    return found


def fake_cache(root: Path, tmp_path: Path, run: str = "r", key: CacheKey | None = None) -> ArtifactCache:
    return ArtifactCache(root, {"run": run}, key or CacheKey(tmp_path / "k", b"k" * 32))


def store_entries(cache: ArtifactCache, tmp_path: Path, sizes: dict[str, int]) -> None:
    for name, size in sizes.items():
        artifact = tmp_path / f"{name}.bin"
        artifact.write_bytes(os.urandom(size))
        cache.store(name, artifact=artifact, expected_sha256=sha256_file(artifact))
        assert name not in cache.problems, cache.problems


def age(folder: Path, seconds_ago: float) -> None:
    stamp = time.time() - seconds_ago
    os.utime(folder, (stamp, stamp))


def test_runs_store_touch_on_hit_and_evict_the_least_recently_used(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    a = RunConfig(checkpoint=DEFAULT_CHECKPOINT, arch=DEFAULT_ARCH, golden=DEFAULT_GOLDEN, out_dir=tmp_path / "a", kinds=KINDS,
                  cache_dir=root, cache_max_size=0)
    first = run_check(a)
    assert [r.cache for r in first.rows] == ["miss", "miss", "miss"]
    cache_a = open_cache(a, first.checkpoint.sha256, first.golden.manifest_sha256)
    assert cache_a is not None
    dirs_a = {cache_a.entry_dir(n) for n in (EAGER, *KINDS)}
    counted = on_disk(root)
    assert set(counted) == dirs_a and cache_prune.usage(root).size == sum(counted.values())
    size_a = sum(counted.values())
    assert size_a > 100_000  # the ResNet's TorchScript and ONNX files

    # a hit records its use: the folders' mtime moves from a week ago to now
    for folder in dirs_a:
        age(folder, 7 * 86400)
    before = time.time() - 1
    hit = run_check(dataclasses.replace(a, out_dir=tmp_path / "a2"))
    assert [r.cache for r in hit.rows] == ["hit", "hit", "hit"]
    assert all(folder.stat().st_mtime >= before for folder in dirs_a)

    # another run key (batch size 8) under a limit of 1.5 runs: its store evicts run a's entries, oldest first
    for folder in dirs_a:
        age(folder, 3600)
    b = dataclasses.replace(a, out_dir=tmp_path / "b", batch_size=8, cache_max_size=1.5 * size_a / 1e9)
    second = run_check(b)
    assert [r.cache for r in second.rows] == ["miss", "miss", "miss"]
    cache_b = open_cache(b, second.checkpoint.sha256, second.golden.manifest_sha256)
    assert cache_b is not None
    dirs_b = {cache_b.entry_dir(n) for n in (EAGER, *KINDS)}
    left = on_disk(root)
    assert dirs_b <= set(left) and sum(left.values()) <= 1.5 * size_a
    evicted = dirs_a - set(left)
    assert evicted, "over the limit, nothing was evicted"
    # the least recently used first: the entries of a that stay are younger than every one evicted
    notes = [n for n in second.row(EAGER).notes if n.startswith("cache: evicted")]
    assert notes == [f"cache: evicted {len(evicted)} least recently used entries ({cache_prune.shown_size(sum(counted[d] for d in evicted))}) "
                     f"to keep {root} under {cache_prune.shown_size(int(round(1.5 * size_a)))}"]
    # what stays is still sealed and intact: run b again is served whole from the cache
    again = run_check(dataclasses.replace(b, out_dir=tmp_path / "b2"))
    assert [r.cache for r in again.rows] == ["hit", "hit", "hit"]
    assert [r.metrics for r in again.rows] == [r.metrics for r in second.rows]


def test_least_recently_used_goes_first_and_the_limit_holds(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    cache = fake_cache(root, tmp_path)
    store_entries(cache, tmp_path, {"old": 3000, "middle": 3000, "new": 3000})
    cache.release()
    for name, ago in (("old", 300), ("middle", 200), ("new", 100)):
        age(cache.entry_dir(name), ago)
    assert cache.lookup("middle") is not None  # a hit: middle becomes the most recently used
    cache.release()
    sizes = on_disk(root)
    pruned = cache_prune.prune(root, sum(sizes.values()) - 1)  # one byte too many: one entry goes
    assert pruned is not None and pruned.removed == 1 and pruned.in_use == 0
    assert set(on_disk(root)) == {cache.entry_dir("middle"), cache.entry_dir("new")}
    assert pruned.freed == sizes[cache.entry_dir("old")]
    pruned = cache_prune.prune(root, sizes[cache.entry_dir("middle")])
    assert pruned is not None and set(on_disk(root)) == {cache.entry_dir("middle")}
    assert cache_prune.prune(root, None) == cache_prune.Pruned(0, 0, 0, cache_prune.usage(root), None)  # no limit: nothing
    assert fake_cache(root, tmp_path).lookup("middle") is not None  # still a sealed, intact entry


def test_an_entry_another_process_uses_is_never_evicted(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    cache = fake_cache(root, tmp_path)
    store_entries(cache, tmp_path, {"held": 2000, "free": 2000})
    cache.release()
    reader = fake_cache(root, tmp_path)
    assert reader.lookup("held") is not None  # this run now holds it until release()
    code = ("import sys, json; from pathlib import Path; from export_check.cache.prune import prune\n"
            "p = prune(Path(sys.argv[1]), 0)\nprint(json.dumps([p.removed, p.in_use, len(p.left.entries)]))\n")
    result = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[1, 1, 1]"
    assert set(on_disk(root)) == {cache.entry_dir("held")}
    entry = reader.lookup("held")
    assert entry is not None and entry.file is not None and reader.restore(entry, tmp_path / "copy.bin")
    reader.release()
    result = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "[1, 0, 0]" and on_disk(root) == {}
    # a run that looked the entry up before it was evicted sees a miss, and stores it again
    assert reader.lookup("held") is None
    store_entries(reader, tmp_path, {"held": 100})
    assert reader.lookup("held") is not None


def test_eviction_follows_no_link(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    cache = fake_cache(root, tmp_path)
    store_entries(cache, tmp_path, {"a": 1000})
    cache.release()
    outside = tmp_path / "users-files"
    outside.mkdir()
    (outside / "precious.txt").write_text("keep me")
    entry = cache.entry_dir("a")
    (entry / "link").symlink_to(outside / "precious.txt")
    planted = entry.parent / ("f" * 64)
    planted.symlink_to(outside, target_is_directory=True)  # an "entry" that is a link to a folder of the user's
    pruned = cache_prune.prune(root, 0)
    assert pruned is not None and pruned.removed == 1
    assert not entry.exists() and (outside / "precious.txt").read_text() == "keep me"
    assert planted.is_symlink() and sorted(p.name for p in outside.iterdir()) == ["precious.txt"]


def test_cache_commands(tmp_path: Path, capsys, monkeypatch) -> None:
    root = tmp_path / "project-cache"
    cache = fake_cache(root, tmp_path)
    store_entries(cache, tmp_path, {"one": 4000, "two": 4000, "three": 4000})
    cache.release()
    for name, ago in (("one", 30), ("two", 20), ("three", 10)):
        age(cache.entry_dir(name), ago)
    sizes = on_disk(root)
    total = sum(sizes.values())
    # the cache folder and its limit from the settings of the current directory
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[tool.export-check]\ncache-dir = "project-cache"\ncache-max-size = 0.01\n')
    assert main(["cache", "info"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:4] == [f"cache: {root}", "entries: 3", f"size: {cache_prune.shown_size(total)} ({total} bytes)", "limit: 10 MB"]
    # prune to what the two youngest hold: the oldest goes
    limit = total - sizes[cache.entry_dir("one")]
    assert main(["cache", "prune", "--max-size", str(limit / 1e9)]) == 0
    out = capsys.readouterr().out
    assert set(on_disk(root)) == {cache.entry_dir("two"), cache.entry_dir("three")}
    assert out.startswith(f"removed 1 entries ({cache_prune.shown_size(sizes[cache.entry_dir('one')])}) from {root}; it holds 2 entries")
    assert main(["cache", "prune"]) == 0 and len(on_disk(root)) == 2  # under the settings' 10 MB: nothing goes
    capsys.readouterr()
    assert main(["cache", "clear", "--cache-dir", str(root)]) == 0
    assert on_disk(root) == {} and "it holds 0 entries" in capsys.readouterr().out
    # bad input: one line, exit 2
    for argv, message in ((["cache", "prune", "--max-size", "-1"], "--max-size must be a finite number >= 0, got -1.0"),
                          (["cache", "info", "--cache-dir", str(tmp_path / "pyproject.toml")], "is not a folder"),
                          (["cache"], "choose info, prune or clear"),
                          (["cache", "prune", "--max-size", "lots"], "argument --max-size: invalid float value: 'lots'")):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("export-check: error: ") and message in err and err.count("\n") == 1, err


def test_cache_max_size_is_an_option_and_a_setting(tmp_path: Path) -> None:
    from export_check.options import from_keywords, overlay, to_run_config
    from export_check.settings import parse_settings

    values = overlay("check", {"checkpoint": tmp_path / "m.pth", "arch": "m:F"}, {})
    assert to_run_config(values).cache_max_size == cache_prune.DEFAULT_MAX_GB == 5.0
    assert parse_settings({"cache-max-size": 0.5}, tmp_path, "pyproject.toml")["cache_max_size"] == 0.5
    assert from_keywords("check", {"cache_max_size": "2"}) == {"cache_max_size": 2.0}
    from export_check.errors import UsageError

    with pytest.raises(UsageError, match="pyproject.toml: cache-max-size must be a finite number >= 0"):
        parse_settings({"cache-max-size": -1}, tmp_path, "pyproject.toml")


def test_a_cache_that_cannot_be_read_is_one_line(tmp_path: Path, capsys, monkeypatch) -> None:
    def unreadable(root):
        raise PermissionError(13, "Permission denied", str(root))

    monkeypatch.setattr(cache_prune, "usage", unreadable)
    assert main(["cache", "info", "--cache-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err == f"export-check: error: {tmp_path}: cannot read the cache (Permission denied); check its permissions, or pass another --cache-dir\n"
