"""files.py: the shared file primitives every reader of an untrusted folder goes through."""

from __future__ import annotations

from pathlib import Path

import pytest


def test_open_beneath_follows_no_link_at_any_level_and_reads_only_regular_files(tmp_path: Path) -> None:
    import errno
    import os

    from export_check import files

    root = tmp_path / "set"
    (root / "inputs").mkdir(parents=True)
    (root / "inputs" / "a.npy").write_bytes(b"12345")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "a.npy").write_bytes(b"secret")
    assert files.read_fd(files.open_beneath(root, "inputs/a.npy"), 5, root / "inputs/a.npy") == b"12345"
    with pytest.raises(files.UnsafeFile, match="more than the 4 allowed"):
        files.read_fd(files.open_beneath(root, "inputs/a.npy"), 4, root / "inputs/a.npy")
    (root / "linked").symlink_to(tmp_path / "outside")
    (root / "inputs" / "b.npy").symlink_to(tmp_path / "outside" / "a.npy")
    os.mkfifo(root / "inputs" / "fifo.npy")
    for rel, says in (("linked/a.npy", "symbolic link"), ("inputs/b.npy", "symbolic link"), ("inputs/fifo.npy", "FIFO"),
                      ("inputs", "directory"), ("../outside/a.npy", "not a path inside")):
        with pytest.raises(files.UnsafeFile, match=says) as info:
            files.open_beneath(root, rel)
        assert info.value.errno in (errno.ELOOP, errno.ENOTDIR, errno.EINVAL, errno.EMLINK)
