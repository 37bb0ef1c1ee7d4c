"""The golden writers and readers under attack and faults (issue 17): nothing lost, nothing forged,
nothing hung. Each test drives the real CLI and asserts the exit code, the one-line message, and that
nothing outside the tool's own files changed (a hash snapshot of the neighbouring files)."""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import export_check.golden.store as store
from conftest import DEFAULT_ARCH, DEFAULT_CHECKPOINT, deadline, forge_golden_file, mounted_tmpfs, save_state
from export_check import files
from export_check.cli import main
from export_check.errors import GoldenError
from export_check.golden.inputs import load_npy
from export_check.golden.manifest import MANIFEST, GoldenSet, parse_manifest, read_manifest
from export_check.golden.reading import ARRAY_MAX_BYTES, JSON_MAX_DEPTH

LINEAR = ["--arch", "torch.nn:Linear", "--arch-kwargs", '{"in_features": 12, "out_features": 3}']


def run(capfd, *argv: object) -> tuple[int, str, str]:
    code = main([os.fsdecode(a) if isinstance(a, bytes) else str(a) for a in argv])
    out, err = capfd.readouterr()
    return code, out, err


def one_line(err: str, *fragments: str) -> str:
    assert err.startswith("export-check: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in err, (fragment, err)
    return err


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (hidden ones too, links as their target text): relative path -> sha256."""
    out = {}
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder).as_posix()
        if p.is_symlink():
            out[rel] = "link->" + os.readlink(p)
        elif p.is_file():
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out




def linear_logits(checkpoint: Path, vectors: list[np.ndarray]) -> np.ndarray:
    """The truth from outside the tool: W x + b by hand."""
    state = torch.load(checkpoint, weights_only=True)
    return np.stack(vectors) @ state["weight"].numpy().T + state["bias"].numpy()


@pytest.fixture()
def linear(tmp_path: Path, monkeypatch) -> Path:
    """A project: two Linear(12, 3) checkpoints, six .npy vectors, a recorded golden set."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "export-check.toml").write_text("")
    for seed, name in ((0, "a.pth"), (1, "b.pth")):
        torch.manual_seed(seed)
        save_state(torch.nn.Linear(12, 3), tmp_path / name)
    (tmp_path / "vectors").mkdir()
    rng = np.random.default_rng(0)
    for i in range(6):
        np.save(tmp_path / "vectors" / f"v{i}.npy", rng.standard_normal(12).astype(np.float32))
    assert main(["golden", "record", "a.pth", *LINEAR, "--inputs", "vectors", "--golden", "g", "-q"]) == 0
    return tmp_path


def vectors(project: Path) -> list[np.ndarray]:
    return [np.load(p) for p in sorted((project / "vectors").glob("*.npy"))]


# --- golden writers touch only their own files ---------------------------------------------------


def _plant_user_files(golden: Path) -> None:
    (golden / "inputs" / "my_new_photo.png").write_bytes(b"\x89PNG not really, but mine")
    (golden / "inputs" / "README.txt").write_text("where these inputs came from")
    np.save(golden / "reference-backup.npy", np.ones((2, 2), np.float32))
    (golden / "NOTES.md").write_text("mine too")


def test_approve_keeps_user_files_and_removes_only_the_old_reference(linear: Path, capfd) -> None:
    golden = linear / "g"
    _plant_user_files(golden)
    old = read_manifest(golden)
    before = snapshot(golden)
    code, out, err = run(capfd, "golden", "approve", "b.pth", *LINEAR, "--golden", golden)
    assert code == 0 and "approved" in out, out + err
    after = snapshot(golden)
    mine = {rel for rel in before if rel.endswith(("my_new_photo.png", "README.txt", "reference-backup.npy", "NOTES.md"))}
    assert len(mine) == 4 and {rel: after.get(rel) for rel in mine} == {rel: before[rel] for rel in mine}
    new = read_manifest(golden)
    assert old.reference_file not in after and new.reference_file in after  # only the old reference went
    assert [i.file for i in new.inputs] == [i.file for i in old.inputs]
    np.testing.assert_allclose(new.reference(), linear_logits(linear / "b.pth", vectors(linear)), rtol=1e-5, atol=1e-6)


def test_record_force_keeps_user_files_and_the_old_sets_files_that_changed(linear: Path, capfd) -> None:
    golden = linear / "g"
    _plant_user_files(golden)
    old = read_manifest(golden)
    changed = golden / old.inputs[0].file
    changed.write_bytes(changed.read_bytes() + b"edited by hand")  # no longer the bytes the manifest recorded: not ours to delete
    for p in (linear / "vectors").glob("*.npy"):
        np.save(p, np.load(p) * 2)  # new content: new file names
    before = snapshot(golden)
    code, out, err = run(capfd, "golden", "record", "a.pth", *LINEAR, "--inputs", "vectors", "--golden", golden, "--force")
    assert code == 0, out + err
    after = snapshot(golden)
    kept = [rel for rel in before if "my_new_photo" in rel or "README" in rel or "backup" in rel or rel == "NOTES.md"]
    assert {rel: after[rel] for rel in kept} == {rel: before[rel] for rel in kept}
    assert after[old.inputs[0].file] == before[old.inputs[0].file]  # the hand-edited file survives
    assert not any(item.file in after for item in old.inputs[1:])  # the old set's untouched files are collected
    assert main(["golden", "verify", str(golden)]) == 0


@pytest.mark.parametrize("manifest", ["not json at all", '{"format": "something-else"}', '{"format": "export-check-golden", "version": 1}'])
def test_record_force_refuses_a_folder_whose_manifest_is_not_ours(linear: Path, manifest: str, capfd) -> None:
    folder = linear / "theirs"
    (folder / "inputs").mkdir(parents=True)
    (folder / MANIFEST).write_text(manifest)
    (folder / "inputs" / "photo.png").write_bytes(b"their photo")
    (folder / "reference-123456789abc.npy").write_bytes(b"their array")
    before = snapshot(folder)
    code, out, err = run(capfd, "golden", "record", "a.pth", *LINEAR, "--inputs", "vectors", "--golden", folder, "--force")
    assert code == 2 and out == ""
    one_line(err, str(folder), "not a golden set export-check can read", "nothing was changed")
    assert snapshot(folder) == before


def test_record_into_a_folder_that_holds_only_other_files_is_refused(linear: Path, capfd) -> None:
    folder = linear / "docs"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    code, _, err = run(capfd, "golden", "record", "a.pth", *LINEAR, "--inputs", "vectors", "--golden", folder, "--force")
    assert code == 2
    one_line(err, "not empty and holds no manifest.json")
    assert snapshot(folder) == {"notes.txt": hashlib.sha256(b"mine").hexdigest()}


def test_a_symlinked_inputs_folder_is_never_followed(linear: Path, tmp_path: Path, capfd) -> None:
    golden = linear / "g"
    elsewhere = tmp_path / "elsewhere"
    shutil.move(golden / "inputs", elsewhere)
    (golden / "inputs").symlink_to(elsewhere)
    (elsewhere / "precious.txt").write_text("outside the golden folder")
    before, golden_before = snapshot(elsewhere), snapshot(golden)
    code, out, _ = run(capfd, "golden", "verify", golden)
    assert code == 1 and "symbolic link" in out
    code, _, err = run(capfd, "golden", "approve", "b.pth", *LINEAR, "--golden", golden)
    assert code == 2
    one_line(err, "symbolic link", "refused")
    code, _, err = run(capfd, "golden", "record", "b.pth", *LINEAR, "--inputs", "vectors", "--golden", golden, "--force")
    assert code == 2
    one_line(err, "symbolic link", "refusing to write into it (nothing was changed)")
    assert snapshot(elsewhere) == before and snapshot(golden) == golden_before


def test_two_inputs_stored_under_one_name_are_refused_before_anything_is_written(linear: Path, capfd) -> None:
    (linear / "clash").mkdir()
    same = np.arange(12, dtype=np.float32)
    np.save(linear / "clash" / "a b.npy", same)
    np.save(linear / "clash" / "a_b.npy", same)
    golden_before = snapshot(linear / "g")
    code, _, err = run(capfd, "golden", "record", "a.pth", *LINEAR, "--inputs", "clash", "--golden", "new")
    assert code == 2
    one_line(err, "'a b.npy' and 'a_b.npy' are both stored as 'a_b.npy'", "rename one")
    assert not (linear / "new").exists()
    code, _, err = run(capfd, "golden", "record", "a.pth", *LINEAR, "--inputs", "clash", "--golden", "g", "--force")
    assert code == 2 and snapshot(linear / "g") == golden_before
    assert main(["golden", "verify", "g"]) == 0


# --- the lock --------------------------------------------------------------------------------------


_WORKER = r"""
import json, sys, time
from pathlib import Path
import export_check.golden.lifecycle as lifecycle
from export_check.cli import main
from export_check.golden.manifest import read_manifest

_load = lifecycle.load_model
def slow_load(*args, **kwargs):  # a bigger model: the read-modify-commit takes a while, so the two overlap
    time.sleep(0.2)
    return _load(*args, **kwargs)
lifecycle.load_model = slow_load
_read, saw = lifecycle.read_manifest, []
def spying_read(root):  # which set did this approve start from?
    golden = _read(root)
    saw.append(golden.model["checkpoint_sha256"])
    return golden
lifecycle.read_manifest = spying_read

me, checkpoint, rounds, sync = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
arch = ["--arch", "torch.nn:Linear", "--arch-kwargs", '{"in_features": 12, "out_features": 3}']

def meet(name):  # a barrier of two processes, through files
    (sync / f"{name}-{me}").touch()
    while not (sync / f"{name}-{1 - me}").exists():
        time.sleep(0.001)

for r in range(rounds):
    meet(f"start{r}")
    code = main(["golden", "approve", checkpoint, *arch, "--golden", "g", "-q"])
    meet(f"done{r}")
    state = {"code": code, "saw": saw.pop()}
    if me == 0:  # both writers are done: what does the set hold now?
        golden = read_manifest(Path("g"))
        state |= {"verify": main(["golden", "verify", "g"]), "checkpoint_sha256": golden.model["checkpoint_sha256"],
                  "reference": golden.reference().tolist(), "files_exist": all((Path("g") / i.file).is_file() for i in golden.inputs),
                  "references": sorted(p.name for p in Path("g").glob("reference-*.npy")), "named": golden.reference_file}
    (sync / f"result{r}-{me}.json").write_text(json.dumps(state))
    if me == 0:  # every round starts from a third checkpoint's set, so that "which set did each start from" tells the order
        assert main(["golden", "approve", "c.pth", *arch, "--golden", "g", "-q"]) == 0
        saw.clear()
    meet(f"checked{r}")
"""


def test_two_concurrent_approves_serialise_and_never_lose_the_reference(linear: Path) -> None:
    """Two real processes approving different checkpoints at the same moment, 12 rounds: each round
    both succeed (one waits for the other's lock) or one fails with the lock's one line; after each
    round the set verifies, names only files that exist, and holds exactly the logits of the
    checkpoint its manifest names (W x + b by hand)."""
    rounds = 12
    torch.manual_seed(2)
    save_state(torch.nn.Linear(12, 3), linear / "c.pth")
    assert main(["golden", "approve", str(linear / "c.pth"), *LINEAR, "--golden", str(linear / "g"), "-q"]) == 0
    sync = linear / "sync"
    sync.mkdir()
    (linear / "worker.py").write_text(_WORKER)
    truth = {hashlib.sha256((linear / n).read_bytes()).hexdigest(): linear_logits(linear / n, vectors(linear)) for n in ("a.pth", "b.pth")}
    procs = [subprocess.Popen([sys.executable, "worker.py", str(me), name, str(rounds), str(sync)], cwd=linear,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for me, name in enumerate(("a.pth", "b.pth"))]
    outputs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    winners = set()
    sha_a, sha_b, sha_c = (hashlib.sha256((linear / n).read_bytes()).hexdigest() for n in ("a.pth", "b.pth", "c.pth"))
    for r in range(rounds):
        mine, theirs = (json.loads((sync / f"result{r}-{me}.json").read_text()) for me in (0, 1))
        assert (mine["code"], theirs["code"]) == (0, 0), (r, outputs)  # the lock serialised them: neither lost its write
        # serialised: the first writer started from c's set, the second from the first one's, and the second's is the final set
        # (without the lock both start from c's set and one approval is silently lost)
        order = {(sha_c, sha_a): sha_b, (sha_b, sha_c): sha_a}.get((mine["saw"], theirs["saw"]))
        assert order == mine["checkpoint_sha256"], (r, mine["saw"], theirs["saw"], mine["checkpoint_sha256"])
        assert mine["verify"] == 0 and mine["files_exist"] and mine["references"] == [mine["named"]], (r, mine)
        np.testing.assert_allclose(np.array(mine["reference"]), truth[mine["checkpoint_sha256"]], rtol=1e-5, atol=1e-6)
        winners.add(mine["checkpoint_sha256"])
    errors = "".join(err for _, err in outputs)
    assert "Traceback" not in errors and errors.count("export-check: error") == 0, errors
    assert len(winners) == 2, "the last writer differs between rounds, so the two really raced"


def test_a_writer_that_cannot_get_the_lock_in_time_fails_with_one_line(linear: Path, capfd, monkeypatch) -> None:
    import fcntl

    import export_check.golden.lock as lock

    monkeypatch.setattr(lock, "LOCK_TIMEOUT", 0.3)
    before = snapshot(linear / "g")
    fd = os.open(linear / "g", os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another writer holds it
        code, _, err = run(capfd, "golden", "approve", "b.pth", *LINEAR, "--golden", "g")
    finally:
        os.close(fd)
    assert code == 2
    one_line(err, "another export-check has been writing this golden set", "wait for it to finish")
    assert snapshot(linear / "g") == before


# --- approve uses exactly the bytes it hashed -------------------------------------------------------


def test_an_input_swapped_while_approve_runs_keeps_its_old_hash_and_fails_verify(linear: Path, capfd, monkeypatch) -> None:
    golden = linear / "g"
    victim = read_manifest(golden).inputs[2]
    real = GoldenSet.load_input

    def load_then_swap(self, item):
        array = real(self, item)
        if item.file == victim.file:  # swapped right after approve read (and hashed) it
            np.save(golden / item.file, np.full(12, 7.0, np.float32))
        return array

    monkeypatch.setattr(GoldenSet, "load_input", load_then_swap)
    assert run(capfd, "golden", "approve", "b.pth", *LINEAR, "--golden", golden)[0] == 0
    monkeypatch.undo()
    entry = next(i for i in read_manifest(golden).inputs if i.file == victim.file)
    assert entry.sha256 == victim.sha256  # the hash of the bytes approve used, not of the swapped file
    code, out, _ = run(capfd, "golden", "verify", golden)
    assert code == 1 and f"CHANGED     {victim.name} ({victim.file})" in out


# --- nothing hangs, nothing unbounded is read ------------------------------------------------------


def _check(capfd, golden: Path) -> tuple[int, str, str]:
    return run(capfd, "a.pth", *LINEAR, "--golden", golden, "--out", golden.parent / "out", "--no-cache", "-q")


@pytest.mark.parametrize("where", ["manifest", "input"])
def test_a_fifo_in_the_golden_set_never_hangs_check_or_verify(linear: Path, where: str, capfd) -> None:
    golden = linear / "g"
    target = golden / (MANIFEST if where == "manifest" else read_manifest(golden).inputs[0].file)
    target.unlink()
    os.mkfifo(target)
    with deadline(60):
        code, out, _ = run(capfd, "golden", "verify", golden)
        assert code == 1 and "FIFO" in out
        code, _, err = _check(capfd, golden)
    assert code == 2
    one_line(err, str(target), "is a FIFO, not a regular file", "refused")


def _deep(depth: int) -> str:
    return '{"format": "export-check-golden", "x": ' + "[" * depth + "]" * depth + "}"


@pytest.mark.parametrize("text, says", [
    (_deep(100_000), f"nests 100001 levels deep (at most {JSON_MAX_DEPTH} are read)"),
    ('{"format": "export-check-golden", "version": ' + "9" * 5000 + "}", "holds an integer of 5,000 digits"),
    ('{"format": "export-check-golden", "version": 1, "inputs": [], "x": NaN}', "NaN is not valid here"),
])
def test_hostile_manifest_json_is_one_line(linear: Path, text: str, says: str, capfd) -> None:
    golden = linear / "g"
    (golden / MANIFEST).write_text(text)
    code, out, _ = run(capfd, "golden", "verify", golden)
    assert code == 1 and says in out and out.count("\n") == 2
    code, _, err = _check(capfd, golden)
    assert code == 2
    one_line(err, f"{golden / MANIFEST}: ", says)


def _npy_header(shape: tuple[int, ...], descr: str = "<f4") -> bytes:
    header = repr({"descr": descr, "fortran_order": False, "shape": shape}).encode()
    header += b" " * (63 - (len(header) + 10) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header


def test_a_reference_header_claiming_23_tib_is_refused_before_allocation(linear: Path, capfd) -> None:
    golden = linear / "g"
    ref = read_manifest(golden).reference_file
    forge_golden_file(golden, ref, _npy_header((6, 1 << 40)) + b"\0" * 64)
    manifest = json.loads((golden / MANIFEST).read_text())
    manifest["reference"]["shape"] = [6, 1 << 40]  # the manifest agrees with the header
    (golden / MANIFEST).write_text(json.dumps(manifest))
    with deadline(30):
        code, _, err = _check(capfd, golden)
    assert code == 2
    one_line(err, ref, "26,388,279,066,624 bytes", f"over the {ARRAY_MAX_BYTES:,}-byte memory budget")
    forge_golden_file(golden, ref, _npy_header((6, 4)) + b"\0" * 96)  # a right-sized header, but not the manifest's shape
    code, _, err = _check(capfd, golden)
    assert code == 2
    one_line(err, ref, "holds float32 (6, 4), manifest says float (6, 1099511627776)")


@pytest.mark.parametrize("values, says", [
    ([[np.nan, 0, 0]], "1 NaN, Inf or float32-overflowing values"),
    ([[1e300, 0, 0]], "1 NaN, Inf or float32-overflowing values"),
])
def test_a_non_finite_or_overflowing_reference_fails_verify_and_check(linear: Path, values, says: str, capfd) -> None:
    golden = linear / "g"
    golden_set = read_manifest(golden)
    array = golden_set.reference().astype(np.float64)
    array[:1] = values
    buf = io.BytesIO()
    np.save(buf, array)
    forge_golden_file(golden, golden_set.reference_file, buf.getvalue())
    code, out, _ = run(capfd, "golden", "verify", golden)
    assert code == 1 and says in out
    code, _, err = _check(capfd, golden)
    assert code == 2
    one_line(err, golden_set.reference_file, says)


def test_a_huge_preprocess_size_is_refused_up_front(linear: Path, digit_images: Path, capfd) -> None:
    with deadline(20):
        code, _, err = run(capfd, "golden", "record", DEFAULT_CHECKPOINT, "--arch", DEFAULT_ARCH, "--inputs", digit_images,
                           "--size", "8192", "--golden", "big")
    assert code == 2 and not (linear / "big").exists()
    one_line(err, "size must be two integers in 1..4096, got (8192, 8192)")
    golden = linear / "g"
    manifest = json.loads((golden / MANIFEST).read_text())
    manifest["preprocess"] = {"size": [8192, 8192]}
    (golden / MANIFEST).write_text(json.dumps(manifest))
    code, _, err = _check(capfd, golden)
    assert code == 2
    one_line(err, "bad preprocess spec", "1..4096")
    manifest["preprocess"] = {"size": [4096, 4096]}  # within the side limit, over the pixel limit
    (golden / MANIFEST).write_text(json.dumps(manifest))
    code, _, err = _check(capfd, golden)
    assert code == 2
    one_line(err, "bad preprocess spec", "size 4096x4096 is over 4,194,304 pixels")


def _png_header_only(width: int, height: int, bit_depth: int = 16) -> bytes:
    """A PNG whose header claims ``width``x``height`` 16-bit grey pixels, with one tiny IDAT."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, bit_depth, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")


def test_a_16_bit_png_near_pillows_limit_is_refused_from_its_header(tmp_path: Path, capfd, monkeypatch) -> None:
    """89 million pixels, just under Pillow's own limit: refused before a byte is decoded."""
    import resource

    monkeypatch.chdir(tmp_path)
    (tmp_path / "photos").mkdir()
    (tmp_path / "photos" / "scan.png").write_bytes(_png_header_only(9440, 9440))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with deadline(30):
        code, _, err = run(capfd, "golden", "record", DEFAULT_CHECKPOINT, "--arch", DEFAULT_ARCH, "--inputs", "photos", "--size", "32",
                           "--golden", "g")
    assert code == 2
    one_line(err, "scan.png: a 9440x9440 image, over the 50,000,000 pixels export-check decodes")
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss < 200_000  # KiB: the peak grew by < 200 MB (model included)


def test_16_bit_images_convert_exactly_as_before_in_float32() -> None:
    from PIL import Image

    from export_check.golden.inputs import _to_mode

    values = np.arange(65536, dtype=np.uint16).reshape(256, 256)
    got = np.asarray(_to_mode(Image.fromarray(values), "L"))
    want = np.clip(values.astype(np.float64) / 65535.0 * 255.0 + 0.5, 0, 255).astype(np.uint8)
    assert np.array_equal(got, want)


# --- never a traceback: full disks, odd names ----------------------------------------------------


def test_a_full_disk_during_approve_is_one_line_and_the_old_set_is_intact(linear: Path, capfd, monkeypatch) -> None:
    golden = linear / "g"
    before = snapshot(golden)
    real, calls = store._write_atomic, []

    def full(path, data):
        calls.append(path.name)
        if path.name == MANIFEST:  # the reference is written, then the disk fills up
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, data)

    monkeypatch.setattr(store, "_write_atomic", full)
    code, _, err = run(capfd, "golden", "approve", "b.pth", *LINEAR, "--golden", golden)
    assert code == 2 and calls[0].startswith("reference-") and calls[1] == MANIFEST
    one_line(err, f"{golden / MANIFEST}: cannot write (No space left on device)", "the golden set is unchanged")
    assert snapshot(golden) == before  # the new reference it had written is gone again
    assert main(["golden", "verify", str(golden)]) == 0


def test_a_real_full_disk_during_record_is_one_line_and_the_old_set_is_intact(linear: Path, tmp_path: Path, capfd) -> None:
    with mounted_tmpfs(tmp_path / "disk", "size=256k", "test_a_full_disk_during_approve_is_one_line covers ENOSPC in-process") as disk:
        shutil.copytree(linear / "g", disk / "g")
        fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT)
        try:  # fill every remaining byte
            while True:
                os.write(fd, b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
        finally:
            os.close(fd)
        before = snapshot(disk / "g")
        for p in (linear / "vectors").glob("*.npy"):
            np.save(p, np.load(p) + 1)
        code, _, err = run(capfd, "golden", "record", "a.pth", *LINEAR, "--inputs", "vectors", "--golden", disk / "g", "--force")
        assert code == 2
        one_line(err, "cannot write (No space left on device)", "the golden set is unchanged")
        assert snapshot(disk / "g") == before
        assert main(["golden", "verify", str(disk / "g")]) == 0


def test_non_utf8_file_names_are_shown_escaped(linear: Path, capfd) -> None:
    folder = linear / "odd"
    folder.mkdir()
    name = os.fsdecode(b"caf\xe9.npy")
    np.save(folder / name, np.arange(12, dtype=np.float32))
    code, out, err = run(capfd, "golden", "record", "a.pth", *LINEAR, "--inputs", folder, "--golden", "odd-golden")
    assert code == 0, err
    (folder / os.fsdecode(b"bad\xff.npy")).write_bytes(b"not an array")
    code, _, err = run(capfd, "golden", "record", "a.pth", *LINEAR, "--inputs", folder, "--golden", "odd2")
    assert code == 2
    one_line(err, "bad\\xff.npy", "not a readable .npy tensor")
    golden = linear / "odd-golden"
    target = golden / read_manifest(golden).inputs[0].file
    target.write_bytes(b"changed")
    code, out, _ = run(capfd, "golden", "verify", golden)
    assert code == 1 and "caf\\xe9.npy" in out and out.isprintable() is False and "\udce9" not in out


# --- file modes --------------------------------------------------------------------------------------


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600)])
def test_golden_files_and_reports_honour_the_umask(linear: Path, umask: int, mode: int, capfd) -> None:
    old = os.umask(umask)
    try:
        assert files.current_umask() == umask
        code, _, err = run(capfd, "golden", "record", "a.pth", *LINEAR, "--inputs", "vectors", "--golden", "moded")
        files.write_bytes(linear / "report.txt", b"a report")
    finally:
        os.umask(old)
    assert code == 0, err
    written = [p for p in (linear / "moded").rglob("*") if p.is_file()] + [linear / "report.txt"]
    assert len(written) == 6 + 2 + 1
    assert {p.name: oct(p.stat().st_mode & 0o777) for p in written} == {p.name: oct(mode) for p in written}


# --- fuzzing -------------------------------------------------------------------------------------------


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=20)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzzed_manifests_parse_or_fail_with_one_golden_error(tmp_path: Path, data) -> None:
    base = json.loads((Path(__file__).parents[2] / "golden" / MANIFEST).read_text())
    choice = data.draw(st.sampled_from(["replace-field", "raw-text", "nest"]))
    if choice == "replace-field":
        key = data.draw(st.sampled_from(sorted(base) + ["recording"]))
        base[key] = data.draw(_json)
        text = json.dumps(base)
    elif choice == "nest":
        depth = data.draw(st.integers(0, 3000))
        text = json.dumps(base)[:-1] + ', "deep": ' + "[" * depth + "]" * depth + "}"
    else:
        text = data.draw(st.text(max_size=200))
    try:
        parse_manifest(tmp_path, text)
    except GoldenError as exc:
        assert "\n" not in str(exc) and str(exc).startswith(str(tmp_path))


@settings(max_examples=200, deadline=None)
@given(shape=st.lists(st.integers(0, 1 << 45), max_size=4).map(tuple), descr=st.sampled_from(["<f4", "<i8", "|O", "<U3", "<f8", "|b1"]),
       tail=st.binary(max_size=64), junk=st.binary(max_size=8))
def test_fuzzed_npy_headers_load_or_fail_with_one_golden_error(shape, descr, tail, junk) -> None:
    data = _npy_header(shape, descr)[: len(_npy_header(shape, descr)) - len(junk)] + junk + tail
    try:
        array = load_npy(data, Path("x.npy"))
    except GoldenError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("x.npy: ")
    else:
        assert array.nbytes == len(tail) and array.nbytes <= ARRAY_MAX_BYTES


# --- streaming record -----------------------------------------------------------------------------


def _peak_rss_of_record(folder: Path, count: int) -> int:
    inputs = folder / f"in{count}"
    inputs.mkdir()
    rng = np.random.default_rng(0)
    for i in range(count):
        np.save(inputs / f"{i:05d}.npy", rng.standard_normal((3, 64, 64)).astype(np.float32))  # 48 KiB each
    script = (
        "import resource, sys\nfrom export_check.cli import main\n"
        f"code = main(['golden', 'record', 'tiny.pth', '--arch', 'tiny_arch.py:Tiny', '--inputs', {str(inputs)!r}, "
        f"'--golden', {str(folder / f'g{count}')!r}, '-q'])\n"
        "print(code, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=folder, capture_output=True, text=True, timeout=300)
    code, rss = result.stdout.split()[-2:]
    assert code == "0", result.stderr
    return int(rss)  # KiB


def test_record_memory_is_flat_in_the_number_of_inputs(tmp_path: Path) -> None:
    (tmp_path / "tiny_arch.py").write_text(
        "import torch\nclass Tiny(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.conv = torch.nn.Conv2d(3, 4, 3)\n        self.head = torch.nn.Linear(4, 2)\n"
        "    def forward(self, x):\n        return self.head(self.conv(x).mean((2, 3)))\n")
    sys.path.insert(0, str(tmp_path))
    try:
        import tiny_arch  # type: ignore[import-not-found]

        save_state(tiny_arch.Tiny(), tmp_path / "tiny.pth")
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("tiny_arch", None)
    (tmp_path / "export-check.toml").write_text("")
    small, large = _peak_rss_of_record(tmp_path, 64), _peak_rss_of_record(tmp_path, 1024)
    # 1,024 inputs are 48 MiB of files and 48 MiB decoded: held at once they would add ~96 MiB
    print(f"peak RSS of golden record: 64 inputs {small / 1024:.1f} MiB, 1024 inputs {large / 1024:.1f} MiB")
    assert large - small < 24 * 1024, (small, large)
