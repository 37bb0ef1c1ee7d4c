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


def test_replacing_writes_atomically_with_the_mode_asked_for_and_leaves_nothing_on_failure(tmp_path: Path) -> None:
    import os

    from export_check import files

    target = tmp_path / "report.json"
    target.write_text("old")
    with pytest.raises(RuntimeError), files.replacing(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed mid-write")
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]
    with files.replacing(target, mode=0o600) as tmp:
        tmp.write_text("new")
    assert target.read_text() == "new" and target.stat().st_mode & 0o777 == 0o600
    files.write_bytes(tmp_path / "b.bin", b"\x00\x01")
    umask = files.current_umask()
    assert umask == os.umask(umask)  # what the process really has
    assert (tmp_path / "b.bin").read_bytes() == b"\x00\x01" and (tmp_path / "b.bin").stat().st_mode & 0o777 == 0o666 & ~umask


def test_file_info_and_sha256_of_real_bytes(tmp_path: Path) -> None:
    import hashlib

    from export_check import files

    data = bytes(range(256)) * 5000
    (tmp_path / "m.pth").write_bytes(data)
    assert files.sha256_file(tmp_path / "m.pth", chunk=1000) == hashlib.sha256(data).hexdigest()
    info = files.file_info(tmp_path / "m.pth")
    assert info.to_json() == {"path": str(tmp_path / "m.pth"), "size_bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def test_read_regular_follows_no_link_and_open_regular_does_when_asked(tmp_path: Path) -> None:
    from export_check import files

    (tmp_path / "real").write_bytes(b"abc")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert files.read_regular(tmp_path / "real", 3) == b"abc"
    with pytest.raises(files.UnsafeFile, match="symbolic link"):
        files.read_regular(tmp_path / "link", 3)
    assert files.read_fd(files.open_regular(tmp_path / "link", follow=True), 3, tmp_path / "link") == b"abc"


@pytest.mark.parametrize(("setup", "says"), [
    (lambda p: None, "checkpoint not found; fix"),
    (lambda p: (p.parent.rmdir(), p.parent.write_text("")), "is a file, not a folder"),
    (lambda p: p.mkdir(), "checkpoint is not a regular file"),
    (lambda p: p.write_bytes(b""), "checkpoint is empty (0 bytes)"),
])
def test_check_readable_file_names_what_is_wrong(tmp_path: Path, setup, says: str) -> None:
    from export_check import files
    from export_check.errors import CheckpointError

    path = tmp_path / "dir" / "model.pth"
    path.parent.mkdir()
    setup(path)
    with pytest.raises(CheckpointError) as info:
        files.check_readable_file(path, "checkpoint", "fix")
    assert str(info.value).startswith(f"{path}: ") and says in str(info.value)
    path2 = tmp_path / "ok.pth"
    path2.write_bytes(b"x")
    files.check_readable_file(path2, "checkpoint", "fix")


def test_prepare_out_dir_and_its_lock(tmp_path: Path) -> None:
    from export_check import files
    from export_check.errors import OutputError

    out = files.prepare_out_dir(tmp_path / "a" / "out")
    assert out.is_dir()
    (tmp_path / "file").write_text("")
    with pytest.raises(OutputError, match="cannot create the output directory"):
        files.prepare_out_dir(tmp_path / "file" / "out")
    with files.locked_out_dir(out):
        assert (out / ".export-check.lock").exists()


def test_lfs_pointers_are_recognised_and_described() -> None:
    import io

    import numpy as np

    from export_check.files import lfs_pointer

    pointer = b"version https://git-lfs.github.com/spec/v1\noid sha256:" + b"ab" * 32 + b"\nsize 123456\n"
    assert lfs_pointer(pointer) == ("is a Git LFS pointer, not the file (123,456 bytes, oid abababababab…): the checkout did not "
                                    "download it; run `git lfs pull` (in GitHub Actions: actions/checkout with `lfs: true`), then rerun")
    assert lfs_pointer(b"version https://hawser.github.com/spec/v1\n").startswith("is a Git LFS pointer, not the file:")
    npy = io.BytesIO()
    np.save(npy, np.zeros(2))
    assert lfs_pointer(pointer + b"x" * 1024) is None and lfs_pointer(npy.getvalue()) is None
