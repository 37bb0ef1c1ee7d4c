"""golden/reading.py: a golden set's untrusted files are read within their bounds; every refusal is one GoldenError line.
(Their bytes decoded within theirs: tests/unit/golden/test_inputs.py.)"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from export_check.errors import GoldenError
from export_check.golden.reading import load_json, read_beneath, read_user_file

SHOWN = Path("golden/x")


def refused(call, *args, **kwargs) -> str:
    with pytest.raises(GoldenError) as info:
        call(*args, **kwargs)
    text = str(info.value)
    assert "\n" not in text
    return text


def test_read_beneath_refuses_links_fifos_pointers_and_missing_files(tmp_path: Path) -> None:
    root = tmp_path / "golden"
    (root / "inputs").mkdir(parents=True)
    (root / "inputs" / "a.npy").write_bytes(b"data")
    (root / "inputs" / "lfs.npy").write_bytes(b"version https://git-lfs.github.com/spec/v1\nsize 9\n")
    (tmp_path / "outside.npy").write_bytes(b"secret")
    (root / "inputs" / "link.npy").symlink_to(tmp_path / "outside.npy")
    os.mkfifo(root / "inputs" / "fifo.npy")
    assert read_beneath(root, "inputs/a.npy", 4, "fix") == b"data"
    assert refused(read_beneath, root, "inputs/gone.npy", 4, "re-record") == f"{root / 'inputs/gone.npy'}: missing; re-record"
    assert refused(read_beneath, root, "inputs/gone.npy", 4, "x", "it is gone") == "it is gone"
    assert "symbolic link" in refused(read_beneath, root, "inputs/link.npy", 100, "fix")
    assert "FIFO" in refused(read_beneath, root, "inputs/fifo.npy", 100, "fix")
    assert "more than the 3 allowed" in refused(read_beneath, root, "inputs/a.npy", 3, "fix")
    assert "is a Git LFS pointer, not the file (9 bytes)" in refused(read_beneath, root, "inputs/lfs.npy", 100, "fix")


def test_read_user_file_follows_a_link_the_user_gave_but_reads_only_regular_files(tmp_path: Path) -> None:
    (tmp_path / "img.png").write_bytes(b"png")
    (tmp_path / "link.png").symlink_to(tmp_path / "img.png")
    assert read_user_file(tmp_path / "link.png", 10, "input") == b"png"
    assert "input disappeared while recording" in refused(read_user_file, tmp_path / "gone.png", 10, "input")
    assert "input is a directory, not a regular file" in refused(read_user_file, tmp_path, 10, "input")


def test_load_json_is_bounded_and_a_golden_error() -> None:
    assert load_json('{"version": 2}', SHOWN) == {"version": 2}
    assert "restore it or re-record the golden set" in refused(load_json, "[" * 40 + "]" * 40, SHOWN)


def test_read_verified_hands_on_the_bytes_whose_sha256_the_manifest_gives(tmp_path: Path) -> None:
    import hashlib

    from export_check.golden.reading import read_verified

    (tmp_path / "inputs").mkdir()
    (tmp_path / "inputs" / "a.npy").write_bytes(b"sample")
    assert read_verified(tmp_path, "inputs/a.npy", hashlib.sha256(b"sample").hexdigest()) == b"sample"
    changed = refused(read_verified, tmp_path, "inputs/a.npy", hashlib.sha256(b"other").hexdigest())
    assert changed.startswith(f"{tmp_path / 'inputs/a.npy'}: content changed since recording (sha256 {hashlib.sha256(b'sample').hexdigest()[:12]}")
    assert refused(read_verified, tmp_path, "inputs/b.npy", "0" * 64) == (f"{tmp_path / 'inputs/b.npy'}: listed in manifest.json but missing; "
                                                                         "restore it or re-record the golden set")
