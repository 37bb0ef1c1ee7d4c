"""A bundle is read within bounds (issue 47, item 5): a member declaring more than the sealed manifest says is
refused before one byte is inflated, and one whose deflate stream runs past its declared size is cut there
(the process's peak RSS and time measured in a subprocess); /dev/zero, a FIFO and a directory are one line at
once; a sealed manifest with a 10^12-float .npy header or 10^18 samples is one line, never a traceback."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_replay import check_and_bundle

from export_check.bundle import DOMAIN, MANIFEST
from export_check.bundle_reading import check_counts
from export_check.cache.secret import KEY_ENV, load_key
from export_check.errors import UsageError
from export_check.golden.reading import SAMPLES_MAX
from export_check.report.seal import sealed_with

GIB = 1 << 30
INPUT = "inputs/00000000/input.npy"
ARTIFACT = "artifacts/onnx.onnx"

# The CLI's replay in a process of its own, started by a small one that prints its exit code, peak RSS (KiB) and seconds.
# Not measured from here: Linux carries the peak RSS of the process that forks across exec (getrusage's ru_maxrss of a
# child of pytest, torch loaded, starts at about 600 MiB); a child of a fresh interpreter starts at that one's 10 MiB.
MEASURED = """
import resource, subprocess, sys, time
started = time.perf_counter()
code = subprocess.run([sys.executable, "-c", "import sys; from export_check.cli import main; sys.exit(main(sys.argv[1:]))",
                       *sys.argv[1:]]).returncode
print(code, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, time.perf_counter() - started)
"""


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The bundled ResNet's onnx row bundled once, under a key file (the folder, the key file)."""
    folder = tmp_path_factory.mktemp("bounds")
    check_and_bundle(folder, folder / "lab.key", "a", "onnx")
    return folder, folder / "lab.key"


def _replay(bundle: Path, key: Path, cwd: Path, timeout: float = 60) -> tuple[int, str, int, float]:
    """``export-check replay BUNDLE`` in a subprocess: exit code, stderr, peak RSS in KiB, seconds. A hang fails at ``timeout``."""
    env = {**os.environ, KEY_ENV: str(key)}
    done = subprocess.run([sys.executable, "-c", MEASURED, "replay", str(bundle), "--out", str(cwd / "out"), "-q"], capture_output=True,
                          text=True, timeout=timeout, cwd=cwd, env=env)
    code, rss, seconds = done.stdout.split()[-3:]
    return int(code), done.stderr, int(rss), float(seconds)


def _one_line(err: str, *words: str) -> None:
    assert err.count("\n") == 1 and "Traceback" not in err and all(w in err for w in words), err


def _with_member(source: Path, dest: Path, name: str, write: object) -> None:
    """``source`` copied to ``dest`` with member ``name``'s bytes written by ``write(handle)`` deflated; the manifest untouched."""
    with zipfile.ZipFile(source) as archive, zipfile.ZipFile(dest, "w") as out:
        for info in archive.infolist():
            if info.filename != name:
                out.writestr(info, archive.read(info))
                continue
            bomb = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            bomb.compress_type = zipfile.ZIP_DEFLATED
            with out.open(bomb, "w") as fh:
                write(fh)  # type: ignore[operator]


def _zeros(fh: io.BufferedIOBase) -> None:
    block = bytes(1 << 24)
    for _ in range(GIB // len(block)):
        fh.write(block)


@pytest.fixture(scope="module")
def bomb(lab: tuple[Path, Path]) -> Path:
    """The bundle with its onnx file replaced by 1 GiB of zeros deflated (about 1 MB), its sealed manifest as it was."""
    folder, _ = lab
    _with_member(folder / "a.bundle", folder / "bomb.bundle", ARTIFACT, _zeros)
    return folder / "bomb.bundle"


def test_a_member_declaring_1_gib_is_refused_before_it_is_inflated(lab, bomb: Path, tmp_path: Path) -> None:
    _, key = lab
    assert bomb.stat().st_size < 4 << 20
    code, err, rss, seconds = _replay(bomb, key, tmp_path)
    print(f"deflate bomb (1 GiB declared): exit {code} in {seconds:.2f} s, peak RSS {rss / 1024:.0f} MiB")
    assert code == 2
    _one_line(err, str(bomb), f"member {ARTIFACT} declares 1,073,741,824 bytes, the sealed manifest", "altered")
    assert rss < 400 * 1024 and seconds < 20  # inflating it took 59 s and 2.1 GB


def _declare(path: Path, name: str, size: int) -> None:
    """Rewrite the uncompressed size the zip declares for ``name`` (its local header and central directory entry) as ``size``."""
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as archive:
        offset = archive.getinfo(name).header_offset
    entry = data.rfind(b"PK\x05\x06")  # the end of central directory record: where the directory starts
    start = int.from_bytes(data[entry + 16:entry + 20], "little")
    while data[start:start + 4] == b"PK\x01\x02":
        length = int.from_bytes(data[start + 28:start + 30], "little")
        extra = int.from_bytes(data[start + 30:start + 32], "little")
        comment = int.from_bytes(data[start + 32:start + 34], "little")
        if data[start + 46:start + 46 + length] == name.encode():
            data[start + 24:start + 28] = size.to_bytes(4, "little")
        start += 46 + length + extra + comment
    data[offset + 22:offset + 26] = size.to_bytes(4, "little")
    path.write_bytes(bytes(data))


def test_a_deflate_stream_longer_than_its_declared_size_is_cut_there(lab, bomb: Path, tmp_path: Path) -> None:
    """The zip declares the manifest's size; the stream behind it inflates to 1 GiB: reading stops at the declared size."""
    folder, key = lab
    with zipfile.ZipFile(folder / "a.bundle") as archive:
        declared = json.loads("{" + archive.read(MANIFEST).decode().split(",", 1)[1])["member_bytes"][ARTIFACT]
    liar = tmp_path / "liar.bundle"
    liar.write_bytes(bomb.read_bytes())
    _declare(liar, ARTIFACT, declared)
    with zipfile.ZipFile(liar) as archive:
        assert archive.getinfo(ARTIFACT).file_size == declared  # as the sealed manifest says
    code, err, rss, seconds = _replay(liar, key, tmp_path)
    print(f"deflate stream past its declared {declared:,} bytes: exit {code} in {seconds:.2f} s, peak RSS {rss / 1024:.0f} MiB")
    assert code == 2
    _one_line(err, str(liar), f"member {ARTIFACT}", "altered")
    assert rss < 400 * 1024 and seconds < 20


@pytest.mark.parametrize("kind", ["device", "fifo", "directory"])
def test_a_bundle_that_is_not_a_regular_file_is_one_line_at_once(lab, tmp_path: Path, kind: str) -> None:
    _, key = lab
    path = {"device": Path("/dev/zero"), "fifo": tmp_path / "pipe.bundle", "directory": tmp_path}[kind]
    if kind == "fifo":
        os.mkfifo(path)  # no writer: opening it for reading without O_NONBLOCK would wait for ever
    code, err, _, seconds = _replay(path, key, tmp_path, timeout=60)
    assert code == 2 and seconds < 10
    _one_line(err, str(path), {"device": "is a device or socket", "fifo": "is a FIFO", "directory": "is a directory"}[kind],
              "not a regular file")


def _resealed(source: Path, dest: Path, key_file: Path, members: dict[str, bytes], **fields: object) -> None:
    """``source`` rewritten as whoever holds the key could: ``members`` replaced, manifest ``fields`` set, sealed again."""
    with zipfile.ZipFile(source) as archive:
        body = json.loads("{" + archive.read(MANIFEST).decode().split(",", 1)[1])
        contents = {i.filename: members.get(i.filename, archive.read(i)) for i in archive.infolist() if i.filename != MANIFEST}
    import hashlib

    body.update(fields)
    body["members"] = {n: hashlib.sha256(d).hexdigest() for n, d in contents.items()}
    body["member_bytes"] = {n: len(d) for n, d in contents.items()}
    os.environ[KEY_ENV] = str(key_file)
    try:
        key = load_key(key_file.parent / "cache")
    finally:
        del os.environ[KEY_ENV]
    text = sealed_with(json.dumps(body, indent=1, sort_keys=True) + "\n", key, DOMAIN)
    with zipfile.ZipFile(dest, "w") as out:
        out.writestr(MANIFEST, text)
        for name, data in contents.items():
            out.writestr(name, data)


def _huge_header() -> bytes:
    out = io.BytesIO()
    np.lib.format.write_array_header_1_0(out, {"descr": "<f4", "fortran_order": False, "shape": (10**12,)})
    return out.getvalue() + bytes(16)


@pytest.mark.parametrize("case", ["npy", "samples", "batch"])
def test_a_sealed_bundle_claiming_too_much_is_one_line(lab, tmp_path: Path, case: str) -> None:
    """Sealed by the key's holder (a bug, or a holder gone rogue): a 10^12-float .npy header, 10^18 samples, a batch of 10^18."""
    folder, key = lab
    path = tmp_path / f"{case}.bundle"
    changes: dict[str, object] = {
        "npy": {"members": {INPUT: _huge_header()}},
        "samples": {"members": {}, "samples": 10**18},
        "batch": {"members": {}, "settings": {"batch_size": 10**18, "threads": 1, "fp16_optimization": "all"}},
    }[case]
    members = changes.pop("members")  # type: ignore[attr-defined]
    _resealed(folder / "a.bundle", path, key, members, **changes)  # type: ignore[arg-type]
    code, err, rss, seconds = _replay(path, key, tmp_path)
    assert code == 2 and seconds < 20 and rss < 400 * 1024
    expected = {"npy": (f"member {INPUT}", "header claims float32 (1000000000000,)", "over the 1,073,741,824-byte memory budget"),
                "samples": ("samples is 1000000000000000000", f"{SAMPLES_MAX:,}"),
                "batch": ("settings.batch_size is 1000000000000000000",)}[case]
    _one_line(err, str(path), *expected, "pass a bundle written by `export-check check --bundle`")


_JSONISH = st.recursive(st.none() | st.booleans() | st.integers(-3, 10**19) | st.text(max_size=3),
                        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=3), max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(samples=st.integers(-2, 40) | _JSONISH, batch_size=st.integers(-1, 20) | _JSONISH,
       batches=st.lists(st.lists(st.integers(-1, 40), min_size=2, max_size=2), max_size=6) | _JSONISH,
       indices=st.lists(st.integers(-2, 45), max_size=5) | _JSONISH)
def test_manifest_counts_are_consistent_or_refused_with_one_line(samples, batch_size, batches, indices) -> None:
    manifest = {"samples": samples, "settings": {"batch_size": batch_size}, "batches": batches, "calibration": {"indices": indices}}
    try:
        check_counts(manifest, "b.bundle: bundle.json", "fix it")
    except UsageError as exc:
        assert str(exc).startswith("b.bundle: bundle.json: ") and "\n" not in str(exc)
        return
    assert 1 <= samples <= SAMPLES_MAX and sum(b[1] for b in batches) == samples and all(1 <= b[1] <= batch_size for b in batches)
    assert all(0 <= i < samples for i in indices)
