"""cache/secret.py: the cache key is made once, private, and refused when it could not prove who wrote the cache."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from export_check.cache.secret import KEY_BYTES, KEY_ENV, CacheKeyError, CacheKeyUnavailable, key_file_path, load_key


@pytest.fixture
def key_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "config"
    folder.mkdir(mode=0o700)
    path = folder / "cache.key"
    monkeypatch.setenv(KEY_ENV, str(path))
    return path


def test_where_the_key_is(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert key_file_path() == tmp_path / "export-check" / "cache.key"
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert key_file_path() == tmp_path / "home" / ".config" / "export-check" / "cache.key"
    monkeypatch.setenv(KEY_ENV, "~/k")
    assert key_file_path() == tmp_path / "home" / "k"


def test_the_first_load_makes_a_private_random_key_and_later_loads_read_it(key_file: Path, tmp_path: Path) -> None:
    first = load_key(tmp_path / "cache")
    assert key_file.stat().st_mode & 0o777 == 0o600 and len(first.secret) == KEY_BYTES
    again = load_key(tmp_path / "cache")
    assert again.secret == first.secret and again.mac(b"m") == first.mac(b"m") and len(first.mac(b"m")) == 64
    assert not [p for p in key_file.parent.iterdir() if p.name.endswith(".partial")]
    key_file.unlink()
    assert load_key(tmp_path / "cache").secret != first.secret


def test_a_key_inside_the_cache_is_refused(key_file: Path) -> None:
    with pytest.raises(CacheKeyError, match="inside the cache folder"):
        load_key(key_file.parent)


@pytest.mark.parametrize(("setup", "says"), [
    (lambda p: (p.write_bytes(os.urandom(32)), p.chmod(0o644)), "readable or writable by others"),
    (lambda p: (p.write_bytes(b"short"), p.chmod(0o600)), "is 5 bytes, not 32"),
    (lambda p: (p.write_bytes(os.urandom(5000)), p.chmod(0o600)), "is 4097+ bytes"),
    (lambda p: p.mkdir(), "the cache key is a folder"),
    (lambda p: os.mkfifo(p, 0o600), "FIFO"),
    (lambda p: (p.write_bytes(os.urandom(32)), p.chmod(0o600), p.parent.chmod(0o777)), "can be written by others"),
])
def test_a_key_that_proves_nothing_is_refused_with_one_line(key_file: Path, tmp_path: Path, setup, says: str) -> None:
    setup(key_file)
    with pytest.raises(CacheKeyError) as info:
        load_key(tmp_path / "cache")
    assert says in str(info.value) and str(info.value).startswith(str(key_file)) and "\n" not in str(info.value)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_no_key_and_no_way_to_make_one_is_unavailable(key_file: Path, tmp_path: Path) -> None:
    key_file.parent.chmod(0o500)
    try:
        with pytest.raises(CacheKeyUnavailable, match="cannot create the cache key"):
            load_key(tmp_path / "cache")
    finally:
        key_file.parent.chmod(0o700)
