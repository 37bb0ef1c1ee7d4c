"""golden/goldenset.py: a set's files read beneath its folder within their bounds and hash-checked (every refusal one
GoldenError line); its samples batched for the run: the first batch sized, the calibration split read as every sample is."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import pytest

from conftest import golden_refusal as refused
from export_check.golden.goldenset import GoldenSet, read_beneath, read_verified
from export_check.golden.store import NewInput, npz_bytes, write_golden_v2
from export_check.signature import InputSpec, OutputSpec, Signature


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


def test_read_verified_hands_on_the_bytes_whose_sha256_the_manifest_gives(tmp_path: Path) -> None:
    (tmp_path / "inputs").mkdir()
    (tmp_path / "inputs" / "a.npy").write_bytes(b"sample")
    assert read_verified(tmp_path, "inputs/a.npy", hashlib.sha256(b"sample").hexdigest()) == b"sample"
    changed = refused(read_verified, tmp_path, "inputs/a.npy", hashlib.sha256(b"other").hexdigest())
    assert changed.startswith(f"{tmp_path / 'inputs/a.npy'}: content changed since recording (sha256 {hashlib.sha256(b'sample').hexdigest()[:12]}")
    assert refused(read_verified, tmp_path, "inputs/b.npy", "0" * 64) == (f"{tmp_path / 'inputs/b.npy'}: listed in manifest.json but missing; "
                                                                         "restore it or re-record the golden set")


# --- batches: a set of two inputs, "x" (float32, samples along axis 1) and "ids" (int64), 7 samples whose x has 3
# values, then 5 from the sixth sample on (a change of shape ends a batch) --------------------------------------------

SIGNATURE = Signature(inputs=(InputSpec("x", "float32", batch_axis=1), InputSpec("ids", "int64")), outputs=(OutputSpec("y"),))
SAMPLES = [{"x": np.arange(3 if i < 5 else 5, dtype=np.float32) + 10 * i, "ids": np.array([i, -i], dtype=np.int64)} for i in range(7)]


@pytest.fixture(scope="module")
def two_inputs(tmp_path_factory: pytest.TempPathFactory) -> GoldenSet:
    root = tmp_path_factory.mktemp("two_inputs")
    inputs = [NewInput(f"s{i}.npz", npz_bytes(sample)) for i, sample in enumerate(SAMPLES)]
    reference = {"y": [np.full(2, i, dtype=np.float32) for i in range(len(SAMPLES))]}
    return write_golden_v2(root, inputs, None, SIGNATURE, reference, {"batch_size": 2, "mode": "eval"}, {}, {})


def test_the_first_batch_is_decoded_with_its_bytes_per_sample_and_the_rest_follow(two_inputs: GoldenSet) -> None:
    (start, first), per_sample, rest = two_inputs.first_batch(2)
    assert start == 0 and first["x"].shape == (3, 2) and first["ids"].shape == (2, 2)
    np.testing.assert_array_equal(first["x"][:, 1], SAMPLES[1]["x"])
    assert per_sample == 3 * 4 + 2 * 8  # one sample's x (3 float32) and ids (2 int64)
    later = list(rest)
    assert [s for s, _ in later] == [2, 4, 5]  # the fifth sample ends its batch alone: the sixth has another shape
    for (s, feeds), (s2, fed) in zip(later, list(two_inputs.feed_batches(2))[1:], strict=True):
        assert s == s2 and all(np.array_equal(feeds[k], fed[k]) for k in ("x", "ids"))
    (_, wide), per_wide, _ = two_inputs.first_batch(10)
    assert wide["x"].shape == (3, 5) and per_wide == 28  # a batch ends where the shapes change


def test_the_calibration_split_is_read_batched_and_stacked_as_every_sample(two_inputs: GoldenSet) -> None:
    chosen = two_inputs.calibration_indices()
    assert chosen and len(chosen) < len(SAMPLES)
    batches = two_inputs.calibration_batches(2)
    ids = np.concatenate([b["ids"] for b in batches])
    np.testing.assert_array_equal(ids, np.stack([SAMPLES[i]["ids"] for i in chosen]))  # the split's samples, in order
    assert all(b["x"].dtype == np.float32 and b["ids"].dtype == np.int64 and b["ids"].shape[0] <= 2 for b in batches)
    for batch in batches:
        assert len({SAMPLES[int(i)]["x"].shape for i in batch["ids"][:, 0]}) == 1 and batch["x"].shape[1] == batch["ids"].shape[0]
    victim = two_inputs.root / two_inputs.inputs[chosen[0]].file
    kept = victim.read_bytes()
    victim.write_bytes(kept[:-1] + bytes([kept[-1] ^ 1]))
    try:  # read again, and hash-checked again
        assert "content changed since recording" in refused(two_inputs.calibration_batches, 2)
    finally:
        victim.write_bytes(kept)
