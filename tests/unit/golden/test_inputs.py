"""golden/inputs.py: a golden file's bytes decoded whole within their bounds (.npy, .npz, the sizes a sample declares);
every refusal is one GoldenError line naming the file."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import golden_refusal as refused
from export_check.errors import GoldenError
from export_check.golden.inputs import check_sample_size, declared_bytes, declared_sample_bytes, load_npy, load_npz, npy_header
from export_check.golden.reading import ARRAY_MAX_BYTES, SAMPLE_MAX_BYTES

SHOWN = Path("golden/x")


def npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


def npz(**arrays: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()


@pytest.mark.parametrize("array", [np.arange(6, dtype=np.float32).reshape(2, 3), np.zeros((0, 4), np.int64), np.array(True),
                                   np.asfortranarray(np.arange(6.0).reshape(2, 3))])
def test_npy_reads_back_exactly(array: np.ndarray) -> None:
    data = npy(array)
    shape, dtype, offset = npy_header(data, SHOWN)
    assert shape == array.shape and dtype == array.dtype and len(data) - offset == array.nbytes
    back = load_npy(data, SHOWN)
    assert back.dtype == array.dtype and np.array_equal(back, array)
    assert declared_bytes(data, "a.npy", SHOWN) == array.nbytes


def test_npy_that_claims_other_bytes_or_holds_objects_is_refused() -> None:
    data = npy(np.arange(10, dtype=np.float64))
    assert "but the file holds 72 bytes of data" in refused(load_npy, data[:-8], SHOWN)
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "|O", "fortran_order": False, "shape": (2,)})
    assert "holds pickled data or object arrays" in refused(npy_header, header.getvalue() + b"\x80" * 16, SHOWN)
    huge = np.lib.format.header_data_from_array_1_0(np.zeros(1, np.float64))
    huge["shape"] = (ARRAY_MAX_BYTES // 8 + 1,)
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, huge)
    assert "over the 1,073,741,824-byte memory budget" in refused(npy_header, buf.getvalue(), SHOWN)
    assert "not a readable .npy array" in refused(load_npy, b"PK\x03\x04not numpy", SHOWN)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200), st.integers(0, 200))
def test_any_bytes_after_a_real_header_load_or_are_one_golden_error(tail: bytes, cut: int) -> None:
    data = npy(np.arange(4, dtype=np.int16))
    try:
        load_npy(data[:cut] + tail, SHOWN)
    except GoldenError as exc:
        assert str(exc).startswith(f"{SHOWN}: ")


def test_npz_reads_every_member_by_name() -> None:
    data = npz(input=np.ones((3, 2), np.float32), mask=np.array([True, False]))
    arrays = load_npz(data, SHOWN)
    assert sorted(arrays) == ["input", "mask"] and arrays["input"].shape == (3, 2) and arrays["mask"].tolist() == [True, False]
    assert declared_bytes(data, "s.NPZ", SHOWN) == sum(len(npy(a)) for a in arrays.values())


def test_npz_over_the_budget_is_refused_before_decompressing() -> None:
    data = npz(big=np.zeros(SAMPLE_MAX_BYTES // 4 + 1, np.float32))  # compresses to almost nothing
    assert len(data) < 1 << 20
    assert "over the 67,108,864 bytes one sample may hold" in refused(load_npz, data, SHOWN, budget=SAMPLE_MAX_BYTES)


def test_what_is_not_an_npz_of_arrays_is_named() -> None:
    assert "holds one bare array" in refused(load_npz, npy(np.zeros(2)), SHOWN)
    assert "pickled data" in refused(load_npz, b"\x80\x04K\x01.", SHOWN)
    assert "not a zip file" in refused(load_npz, b"hello", SHOWN)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        archive.writestr("notes.txt", "hi")
    assert "member 'notes.txt' is not an array" in refused(load_npz, buf.getvalue(), SHOWN)


def test_a_member_larger_than_its_header_says_is_refused() -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("a.npy", npy(np.zeros(4)))
    data = bytearray(buf.getvalue())
    # shrink the declared uncompressed size in the central directory (offset 24 of its entry)
    central = data.rfind(b"PK\x01\x02")
    size = int.from_bytes(data[central + 24:central + 28], "little")
    data[central + 24:central + 28] = (size - 8).to_bytes(4, "little")
    text = refused(load_npz, bytes(data), SHOWN)
    assert "member 'a.npy'" in text


def test_declared_bytes_of_images_and_garbage_is_zero_and_safetensors_its_length() -> None:
    assert declared_bytes(b"\x89PNG....", "a.png", SHOWN) == 0
    assert declared_bytes(b"garbage", "a.npz", SHOWN) == 0 and declared_bytes(b"garbage", "a.npy", SHOWN) == 0
    assert declared_bytes(b"12345", "a.safetensors", SHOWN) == 5
    check_sample_size(SAMPLE_MAX_BYTES, SHOWN)
    assert "declares 67,108,865 bytes" in refused(check_sample_size, SAMPLE_MAX_BYTES + 1, SHOWN)


def test_a_sample_declares_its_decoded_size_and_one_over_the_sample_bound_is_refused_naming_it() -> None:
    data = npz(input=np.ones((3, 2), np.float32), ids=np.arange(5, dtype=np.int64))
    assert declared_sample_bytes(data, "s.npz", SHOWN) == len(npy(np.ones((3, 2), np.float32))) + len(npy(np.arange(5, dtype=np.int64)))
    bomb = npz(big=np.zeros(SAMPLE_MAX_BYTES // 4 + 1, np.float32))  # compresses to almost nothing, declares 64 MiB and more
    assert refused(declared_sample_bytes, bomb, "s.npz", SHOWN).startswith(f"{SHOWN}: declares 67,108,9")
    assert declared_sample_bytes(b"\x89PNG....", "a.png", SHOWN) == 0  # an image is bounded by its pixels when decoded
