"""nofollow.py: below the cache root nothing is reached through a link, and only regular files are read."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from export_check.nofollow import Folder, Refused, copy_fd, describe, open_regular, sha256_fd, sha256_regular, within, write_inside


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "cache"
    (root / "v3" / "ab").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "secret").write_bytes(b"secret")
    (root / "v3" / "linked").symlink_to(tmp_path / "elsewhere")
    (root / "v3" / "ab" / "meta.json").write_bytes(b"{}")
    (root / "v3" / "ab" / "link.json").symlink_to(tmp_path / "elsewhere" / "secret")
    os.mkfifo(root / "v3" / "ab" / "fifo")
    return root


def test_walk_opens_and_creates_folders_and_refuses_a_linked_one(tree: Path) -> None:
    with Folder.walk(tree, ("v3", "ab"), create=False) as folder:
        assert folder is not None and folder.path == tree / "v3" / "ab" and folder.read("meta.json", 2) == b"{}"
    with Folder.walk(tree, ("v3", "new", "deeper"), create=True) as folder:
        assert folder is not None and (tree / "v3" / "new" / "deeper").is_dir()
    with Folder.walk(tree, ("v3", "missing"), create=False) as folder:
        assert folder is None
    with Folder.walk(tree.parent / "absent", ("x",), create=False) as folder:
        assert folder is None
    with pytest.raises(Refused, match="is a symbolic link, not a folder export-check made"), Folder.walk(tree, ("v3", "linked"), create=True):
        pass
    assert sorted(os.listdir(tree.parent / "elsewhere")) == ["secret"]


def test_files_are_read_only_when_regular_and_within_their_limit(tree: Path) -> None:
    with Folder.walk(tree, ("v3", "ab"), create=False) as folder:
        assert folder is not None
        with pytest.raises(Refused, match="symbolic link; not followed"):
            folder.read("link.json", 100)
        with pytest.raises(Refused, match="is a FIFO, not a regular file"):
            folder.read("fifo", 100)
        with pytest.raises(Refused, match="is 2 bytes, more than the 1"):
            folder.read("meta.json", 1)
        for bad in ("", ".", "..", "a/b", "a\0b"):
            with pytest.raises(Refused, match="is not a plain file name"):
                folder.lstat(bad)
        assert (folder.what("fifo"), folder.what("link.json"), folder.what("gone")) == ("a FIFO", "a symbolic link", "missing")


def test_write_atomic_replaces_a_link_instead_of_writing_through_it(tree: Path) -> None:
    with Folder.walk(tree, ("v3", "ab"), create=False) as folder:
        assert folder is not None
        folder.write_atomic("link.json", b"ours")
        folder.write_atomic("meta.json", b'{"a": 1}')
    assert (tree.parent / "elsewhere" / "secret").read_bytes() == b"secret"
    entry = tree / "v3" / "ab"
    assert not (entry / "link.json").is_symlink() and (entry / "link.json").read_bytes() == b"ours"
    assert (entry / "meta.json").read_bytes() == b'{"a": 1}' and not [n for n in os.listdir(entry) if n.endswith(".partial")]


def test_remove_file_removes_only_regular_files(tree: Path) -> None:
    with Folder.walk(tree, ("v3", "ab"), create=False) as folder:
        assert folder is not None
        assert folder.remove_file("meta.json") and not folder.remove_file("link.json") and not folder.remove_file("fifo")
        assert not folder.remove_file("meta.json")
    assert (tree / "v3" / "ab" / "link.json").is_symlink()


def test_a_held_partial_is_not_swept_an_abandoned_one_is(tree: Path) -> None:
    with Folder.walk(tree, ("v3", "ab"), create=False) as folder:
        assert folder is not None
        held, fd = folder.new_temp("artifact")
        abandoned, other = folder.new_temp("artifact")
        os.close(other)  # its writer is gone: the lock with it
        for name in (held, abandoned):
            os.utime(name, (1.0, 1.0), dir_fd=folder.fd)
        try:
            assert folder.sweep_partials() == 1
            assert folder.lstat(held) is not None and folder.lstat(abandoned) is None
        finally:
            os.close(fd)
            folder.discard(held)


def test_hashes_and_copies_of_real_bytes(tmp_path: Path) -> None:
    data = os.urandom(300_000)
    (tmp_path / "src").write_bytes(data)
    (tmp_path / "link").symlink_to(tmp_path / "src")
    digest = hashlib.sha256(data).hexdigest()
    assert sha256_regular(tmp_path / "link") == digest  # the user's own source: a link is followed
    with pytest.raises(Refused, match="is a symbolic link; not followed"):
        open_regular(tmp_path / "link", follow=False)
    src = open_regular(tmp_path / "src")
    dst = os.open(tmp_path / "dst", os.O_WRONLY | os.O_CREAT)
    try:
        assert copy_fd(src, dst) == (digest, len(data))
    finally:
        os.close(src)
        os.close(dst)
    assert (tmp_path / "dst").read_bytes() == data
    fd = open_regular(tmp_path / "src")
    try:
        with pytest.raises(Refused, match="more than the 1000 bytes expected"):
            sha256_fd(fd, 1000)
    finally:
        os.close(fd)


def test_describe() -> None:
    import stat

    assert [describe(m) for m in (stat.S_IFLNK, stat.S_IFIFO, stat.S_IFDIR, stat.S_IFSOCK, stat.S_IFCHR, stat.S_IFBLK, stat.S_IFREG)] == [
        "a symbolic link", "a FIFO", "a folder", "a socket", "a character device", "a block device", "a regular file"]


# ---- write_inside: the one writer of every file export-check puts in --out ---------------------------------


@pytest.fixture
def planted(tmp_path: Path) -> tuple[Path, Path]:
    """An --out holding what a hostile neighbour planted: a link to a file outside, a link to a folder
    outside, a hard link to a file outside, a FIFO."""
    out, outside = tmp_path / "out", tmp_path / "home"
    out.mkdir(), outside.mkdir()
    (outside / "bashrc").write_bytes(b"the user's file\n")
    (outside / "r.onnx").write_bytes(b"the user's model\n")
    (out / "report.json").symlink_to(outside / "bashrc")
    (out / "reduced").symlink_to(outside)
    os.link(outside / "bashrc", out / "history.jsonl")
    os.mkfifo(out / "r.md")
    return out, outside


@pytest.mark.parametrize("rel, append, what", [
    ("report.json", False, "report.json: is a symbolic link inside"),
    ("report.json", True, "report.json: is a symbolic link inside"),
    ("reduced/r.onnx", False, "reduced is a symbolic link, not a folder export-check made; not followed"),
    ("reduced/new.npz", False, "reduced is a symbolic link, not a folder export-check made; not followed"),
    ("history.jsonl", True, "history.jsonl: has 1 other name(s) (a hard link) inside"),
    ("r.md", False, "r.md: is a FIFO inside"),
])
def test_write_inside_refuses_a_planted_link_in_one_line_and_leaves_its_target_unchanged(planted, rel: str, append: bool,
                                                                                          what: str) -> None:
    out, outside = planted
    before = {p.name: p.read_bytes() for p in outside.iterdir()}
    with pytest.raises(Refused) as refused:
        write_inside(out, rel, b"export-check's bytes\n", append=append)
    assert what in str(refused.value) and "\n" not in str(refused.value) and str(out) in str(refused.value)
    assert {p.name: p.read_bytes() for p in outside.iterdir()} == before  # nothing outside changed, nothing added there
    assert (out / "report.json").is_symlink() and (out / "reduced").is_symlink()  # refused, not replaced either


def test_write_inside_replaces_a_hard_link_by_name_and_writes_new_folders(planted) -> None:
    out, outside = planted
    assert write_inside(out, "history.jsonl", b"new\n") == out / "history.jsonl"
    assert (outside / "bashrc").read_bytes() == b"the user's file\n"  # its other name keeps its bytes
    assert (out / "history.jsonl").read_bytes() == b"new\n" and os.stat(out / "history.jsonl").st_nlink == 1
    write_inside(out, "history.jsonl", b"more\n", append=True)
    assert (out / "history.jsonl").read_bytes() == b"new\nmore\n"
    assert write_inside(out, "sub/deeper/x.npz", b"x") == out / "sub" / "deeper" / "x.npz"
    assert (out / "sub" / "deeper" / "x.npz").read_bytes() == b"x" and not list(out.rglob("*.partial"))


def test_within_places_a_path_inside_the_out_folder_only_as_spelt_or_below_its_real_path(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "real")  # the user's own link to --out: the root may be one
    assert within(tmp_path / "alias" / "a" / "r.json", tmp_path / "alias") == (tmp_path / "alias", "a/r.json")
    assert within(tmp_path / "real" / "r.json", tmp_path / "alias") == (tmp_path / "real", "r.json")
    assert within(tmp_path / "realistic" / "r.json", tmp_path / "real") is None
    assert within(tmp_path / "r.json", tmp_path / "real") is None and within(tmp_path / "r.json", None) is None
