"""golden/store.py: reference archives and garbage collection of a golden folder."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def test_reference_archives_are_content_addressed() -> None:
    from export_check.golden.inputs import load_npz
    from export_check.golden.store import npz_bytes

    arrays = {"boxes/0": np.arange(6, dtype=np.float32).reshape(2, 3), "boxes/1": np.zeros((1, 3), np.float32), "a.b/0": np.array([1, 2])}
    data = npz_bytes(arrays)
    assert npz_bytes(dict(arrays)) == data  # no timestamps: the same arrays, the same bytes
    back = load_npz(data, Path("r.npz"))
    assert list(back) == list(arrays) and all(np.array_equal(back[k], v) and back[k].dtype == v.dtype for k, v in arrays.items())


def test_garbage_collection_removes_only_named_files_that_still_hash_as_recorded(tmp_path: Path) -> None:
    import hashlib

    import export_check.golden.store as store

    (tmp_path / "inputs").mkdir()
    for name, data in (("x.png", b"ours"), ("y.png", b"edited"), ("README.txt", b"mine")):
        (tmp_path / "inputs" / name).write_bytes(data)
    (tmp_path / "reference-0123456789ab.npy").symlink_to(tmp_path / "inputs" / "README.txt")
    sha = {n: hashlib.sha256(d).hexdigest() for n, d in (("x", b"ours"), ("y", b"original"), ("r", b"mine"))}
    store._collect_garbage(tmp_path, {"inputs/x.png": sha["x"], "inputs/y.png": sha["y"], "reference-0123456789ab.npy": sha["r"]})
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["README.txt", "inputs", "reference-0123456789ab.npy", "y.png"]
    assert not store._ours("README.md") and not store._ours("inputs/sub/x.png") and store._ours("reference-0123456789ab.npz")
