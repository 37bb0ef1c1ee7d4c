"""Bad input through the real CLI: one line naming the file and the fix, exit 2, nothing run or built.

Each case drives ``export_check.cli.main`` and checks the whole contract: the exit code, that stderr is
exactly one ``export-check: error:`` line (fd-level, so nothing native slips past), that it names
the file and says how to fix it, and that no traceback is printed. The hypothesis tests at the end
feed the parsers random and mutated bytes.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import pickle
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from arches import TinyNet
from conftest import DEFAULT_ARCH, DEFAULT_CHECKPOINT, DEFAULT_GOLDEN, TESTS, mounted_tmpfs, save_state, seeded
from export_check.checkpoint import load_state_dict
from export_check.cli import main
from export_check.errors import CheckpointError, GoldenError, UsageError
from export_check.golden.inputs import Preprocess, decode_input, preprocess_image
from export_check.golden.manifest import MANIFEST, read_manifest
from export_check.golden.preprocess import MAX_SIDE

TINY = f"{TESTS / 'arches.py'}:TinyNet"
LOG_OF_MARGIN = f"{TESTS / 'fault_arches.py'}:LogOfMargin"


def run_cli(capfd: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capfd.readouterr()
    return code, out, err


def assert_one_line_error(err: str, *expected: str) -> None:
    """stderr is exactly one error line holding every ``expected`` fragment (the file and the fix)."""
    assert err.startswith("export-check: error: "), err
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert "Traceback" not in err
    for fragment in expected:
        assert fragment in err, (fragment, err)


def check_argv(checkpoint: Path, out: Path, golden: Path = DEFAULT_GOLDEN, arch: str = DEFAULT_ARCH) -> list[object]:
    return [checkpoint, "--arch", arch, "--golden", golden, "--out", out, "--no-cache", "-q"]


def built_files(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) if out.is_dir() else []


# --- checkpoints -------------------------------------------------------------------------------


def _half_of_a_real_checkpoint(folder: Path) -> Path:
    data = DEFAULT_CHECKPOINT.read_bytes()
    path = folder / "truncated.pth"
    path.write_bytes(data[: len(data) // 2])
    return path


def _png(folder: Path) -> Path:
    from PIL import Image

    path = folder / "picture.pth"
    Image.new("RGB", (8, 8), (200, 10, 10)).save(path, format="PNG")
    return path


def _npy(folder: Path) -> Path:
    path = folder / "weights.npy"
    np.save(path, np.ones((3, 3), np.float32))
    return path


def _zip_of_junk(folder: Path) -> Path:
    path = folder / "junk.pth"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("junk/readme.txt", "not a checkpoint")
        archive.writestr("junk/blob.bin", bytes(range(256)) * 4)
    return path


def _zip_with_a_fake_data_pkl(folder: Path) -> Path:
    path = folder / "fake.pth"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("fake/data.pkl", b"\x00\x01\x02 not a pickle")
    return path


def _torchscript(folder: Path) -> Path:
    import warnings

    path = folder / "scripted.pt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit is deprecated; the file is what matters
        torch.jit.save(torch.jit.script(seeded(TinyNet)), str(path))
    return path


def _fifo(folder: Path) -> Path:
    path = folder / "pipe.pth"
    os.mkfifo(path)  # opening it would block forever: it must be refused without being opened
    return path


def _under_a_file(folder: Path) -> Path:
    (folder / "notadir").write_text("a file")
    return folder / "notadir" / "model.pth"


def _dangling_link(folder: Path) -> Path:
    path = folder / "link.pth"
    os.symlink(folder / "gone.pth", path)
    return path


def _file(name: str, data: bytes):
    def make(folder: Path) -> Path:
        (folder / name).write_bytes(data)
        return folder / name

    return make


def _directory(folder: Path) -> Path:
    (folder / "dir.pth").mkdir()
    return folder / "dir.pth"


def _list_of_tensors(folder: Path) -> Path:
    torch.save([torch.zeros(2)], folder / "list.pth")
    return folder / "list.pth"


CHECKPOINT_CASES = {
    # name: (make the file, what the message must say)
    "missing": (lambda d: d / "nope.pth", "checkpoint not found"),
    "dangling-link": (_dangling_link, "checkpoint not found"),
    "parent-is-a-file": (_under_a_file, "is a file, not a folder"),
    "directory": (_directory, "not a regular file"),
    "fifo": (_fifo, "not a regular file"),
    "empty": (_file("empty.pth", b""), "is empty (0 bytes)"),
    "truncated": (_half_of_a_real_checkpoint, "truncated or corrupt zip archive"),
    "png": (_png, "it is a PNG image"),
    "text": (_file("notes.pth", b"epoch 3, loss 0.1\n"), "it is a text file"),
    "npy": (_npy, "it is a NumPy .npy array"),
    "zip-of-junk": (_zip_of_junk, "a zip archive but not a PyTorch checkpoint"),
    "zip-with-fake-data.pkl": (_zip_with_a_fake_data_pkl, "a zip archive but not a PyTorch checkpoint"),
    "torchscript": (_torchscript, "a TorchScript archive, not a state_dict"),
    "list-of-tensors": (_list_of_tensors, "holds a list, not a state_dict"),
}


@pytest.mark.parametrize("case", sorted(CHECKPOINT_CASES))
def test_unusable_checkpoint_is_one_line_exit_2_and_nothing_is_built(case: str, tmp_path: Path, capfd) -> None:
    make, says = CHECKPOINT_CASES[case]
    checkpoint = make(tmp_path)
    out = tmp_path / "out"
    code, stdout, err = run_cli(capfd, *check_argv(checkpoint, out))
    assert code == 2
    fix = "torch.save" if case not in ("missing", "dangling-link", "parent-is-a-file", "directory", "fifo") else "pass the path"
    assert_one_line_error(err, str(checkpoint), says, fix)
    assert stdout == ""
    assert built_files(out) == []


@pytest.mark.parametrize("command", ["record", "approve"])
def test_golden_commands_refuse_a_truncated_checkpoint_too(
    command: str, tmp_path: Path, golden_copy: Path, digit_images: Path, capfd
) -> None:
    checkpoint = _half_of_a_real_checkpoint(tmp_path)
    before = {p.name: p.read_bytes() for p in golden_copy.rglob("*") if p.is_file()}
    extra = ["--inputs", digit_images, "--size", "32", "--force"] if command == "record" else []
    code, _, err = run_cli(capfd, "golden", command, checkpoint, "--arch", DEFAULT_ARCH, "--golden", golden_copy, *extra)
    assert code == 2
    assert_one_line_error(err, str(checkpoint), "truncated or corrupt zip archive", "torch.save")
    assert {p.name: p.read_bytes() for p in golden_copy.rglob("*") if p.is_file()} == before


# --- pickles that would run code -----------------------------------------------------------------


class _System:
    """Unpickling this calls os.system(command)."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


@contextlib.contextmanager
def _evil_class(folder: Path, marker: Path) -> Iterator[type]:
    """A model class whose import and whose unpickling each leave a marker file. While in the block
    its folder is on sys.path, so an unsafe load could import it: only a safe loader never does."""
    name = "evilnet_for_pickle_test"
    (folder / f"{name}.py").write_text(
        "import pathlib, torch\n"
        f"pathlib.Path({str(marker) + '.imported'!r}).touch()\n"
        "class EvilNet(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc = torch.nn.Linear(2, 2)\n"
        "    def __setstate__(self, state):\n"
        f"        pathlib.Path({str(marker)!r}).touch()\n"
        "        super().__setstate__(state)\n"
    )
    sys.path.insert(0, str(folder))
    try:
        module = importlib.import_module(name)
        Path(str(marker) + ".imported").unlink()  # this side imported it on purpose
        yield module.EvilNet
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop(name, None)


def _payloads(folder: Path, marker: Path) -> dict[str, tuple[Path, str]]:
    touch = f"touch {marker}"
    weights = seeded(TinyNet).state_dict()
    cases: dict[str, tuple[Path, str]] = {}

    def save(name: str, obj: object, says: str, **kwargs) -> None:
        path = folder / f"{name}.pth"
        torch.save(obj, path, **kwargs)
        cases[name] = (path, says)

    save("dict", {**weights, "payload": _System(touch)}, "asks for posix.system")
    save("nested", {"state_dict": weights, "meta": {"history": [1, 2, {"cb": _System(touch)}]}}, "asks for posix.system")
    with _evil_class(folder, marker) as cls:
        save("whole-model", cls(), "a whole pickled object (evilnet_for_pickle_test.EvilNet")
    save("legacy-format", {**weights, "payload": _System(touch)}, "asks for posix.system", _use_new_zipfile_serialization=False)
    raw = folder / "raw-pickle.pth"
    raw.write_bytes(pickle.dumps({"w": _System(touch)}, protocol=2))
    cases["raw-pickle"] = (raw, "asks for posix.system")
    raw4 = folder / "raw-pickle-v4.pth"
    raw4.write_bytes(pickle.dumps(_System(touch), protocol=4))
    cases["raw-pickle-v4"] = (raw4, "refused: not a weights-only pickle")
    # eval via builtins, hand-written opcodes: GLOBAL builtins.eval, then REDUCE with one argument
    code = f"__import__('pathlib').Path({str(marker)!r}).touch()"
    hand = folder / "builtins-eval.pth"
    hand.write_bytes(b"\x80\x02cbuiltins\neval\nq\x00X" + len(code).to_bytes(4, "little") + code.encode() + b"q\x01\x85q\x02Rq\x03.")
    cases["builtins-eval"] = (hand, "asks for eval")  # torch names builtins without the module
    # the payload hidden inside an otherwise real checkpoint's zip
    inside = folder / "inside-zip.pth"
    with zipfile.ZipFile(DEFAULT_CHECKPOINT) as src, zipfile.ZipFile(inside, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            if item.filename.endswith("data.pkl"):
                data = pickle.dumps(_System(touch), protocol=2)
            dst.writestr(item, data)
    cases["inside-zip"] = (inside, "asks for posix.system")
    return cases


def test_payloads_run_directly_would_execute(tmp_path: Path) -> None:
    """The control: the same payloads do run code when unpickled unsafely, so their absence below means something."""
    marker = tmp_path / "pwned"
    pickle.loads(pickle.dumps(_System(f"touch {marker}")))
    assert marker.exists()
    marker.unlink()
    with _evil_class(tmp_path, marker) as cls:
        torch.save(cls(), tmp_path / "whole.pth")
        sys.modules.pop(cls.__module__)
        torch.load(tmp_path / "whole.pth", weights_only=False)
    assert marker.exists() and Path(str(marker) + ".imported").exists()


@pytest.mark.parametrize("command", ["check", "record", "approve"])
def test_pickles_that_would_run_code_are_refused_and_never_run(
    command: str, tmp_path: Path, golden_copy: Path, digit_images: Path, capfd
) -> None:
    marker = tmp_path / "pwned"
    cases = _payloads(tmp_path, marker)
    before = {p.name: p.read_bytes() for p in golden_copy.rglob("*") if p.is_file()}
    with _evil_class(tmp_path, marker) as cls:
        sys.modules.pop(cls.__module__)  # a load that honoured the pickle would import it again
        for name, (path, says) in cases.items():
            if command == "check":
                argv = check_argv(path, tmp_path / "out")
            else:
                extra = ["--inputs", digit_images, "--size", "32", "--force"] if command == "record" else []
                argv = ["golden", command, path, "--arch", DEFAULT_ARCH, "--golden", golden_copy, *extra]
            code, _, err = run_cli(capfd, *argv)
            assert code == 2, name
            assert_one_line_error(err, str(path), "refused", says, "torch.save(model.state_dict(), path)")
            assert not marker.exists(), f"the {name} payload ran"
            assert not Path(str(marker) + ".imported").exists(), f"the {name} payload imported its module"
    assert built_files(tmp_path / "out") == []
    assert {p.name: p.read_bytes() for p in golden_copy.rglob("*") if p.is_file()} == before


# --- checkpoint vs architecture ------------------------------------------------------------------


def test_checkpoint_of_another_architecture_lists_keys_and_counts(tmp_path: Path, capfd) -> None:
    checkpoint = save_state(seeded(TinyNet), tmp_path / "tiny.pth")
    code, _, err = run_cli(capfd, *check_argv(checkpoint, tmp_path / "out"))
    assert code == 2
    expected = torch.load(DEFAULT_CHECKPOINT, weights_only=True)
    given_keys = seeded(TinyNet).state_dict()
    missing = [k for k in expected if k not in given_keys]
    unexpected = [k for k in given_keys if k not in expected]
    assert len(missing) > 3 and len(unexpected) > 3  # so "first few ... in all" is exercised
    assert_one_line_error(
        err, str(checkpoint), f"does not fit {DEFAULT_ARCH}",
        f"{len(missing)} missing: {', '.join(missing[:3])}, … {len(missing)} in all",
        f"{len(unexpected)} unexpected: {', '.join(unexpected[:3])}, … {len(unexpected)} in all",
        "check --arch and --arch-kwargs",
    )
    assert built_files(tmp_path / "out") == []


def test_shape_mismatch_through_the_cli(tmp_path: Path, capfd) -> None:
    state = torch.load(DEFAULT_CHECKPOINT, weights_only=True)
    key = next(k for k, v in state.items() if v.ndim == 2)  # the classifier
    state[key] = torch.zeros(state[key].shape[0] + 1, state[key].shape[1])
    checkpoint = tmp_path / "wider.pth"
    torch.save(state, checkpoint)
    code, _, err = run_cli(capfd, *check_argv(checkpoint, tmp_path / "out"))
    assert code == 2
    shape = tuple(state[key].shape)
    assert_one_line_error(err, str(checkpoint), f"1 shape mismatch: {key} {shape}!=({shape[0] - 1}, {shape[1]})")


# --- golden sets ---------------------------------------------------------------------------------


def _manifest(golden: Path) -> dict:
    return json.loads((golden / MANIFEST).read_text())


def _write_manifest(golden: Path, manifest: dict) -> None:
    (golden / MANIFEST).write_text(json.dumps(manifest, indent=2))


def _corrupt_image_with_matching_hash(golden: Path, index: int = 3) -> str:
    """Truncate one PNG and update its hash: the integrity check passes, decoding must fail."""
    import hashlib

    manifest = _manifest(golden)
    entry = manifest["inputs"][index]
    path = golden / entry["file"]
    data = path.read_bytes()[:60]  # the header and half the pixel data
    path.write_bytes(data)
    entry["sha256"] = hashlib.sha256(data).hexdigest()
    _write_manifest(golden, manifest)
    return entry["file"]


def _eps_named_png(golden: Path) -> str:
    """A PostScript file under a .png name: Pillow would hand it to Ghostscript if it sniffed formats freely."""
    import hashlib

    manifest = _manifest(golden)
    entry = manifest["inputs"][0]
    data = b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 8 8\nnewpath 0 0 moveto showpage\n"
    (golden / entry["file"]).write_bytes(data)
    entry["sha256"] = hashlib.sha256(data).hexdigest()
    _write_manifest(golden, manifest)
    return entry["file"]


def _tamper_image(golden: Path) -> str:
    rel = _manifest(golden)["inputs"][5]["file"]
    data = bytearray((golden / rel).read_bytes())
    data[-20] ^= 0xFF
    (golden / rel).write_bytes(bytes(data))
    return rel


def _tamper_logits(golden: Path) -> str:
    rel = _manifest(golden)["reference"]["file"]
    array = np.load(golden / rel)
    array[0, 0] += 1e-3
    np.save(golden / rel, array)
    return rel


def _set(field: str, value: object):
    def mutate(golden: Path) -> str:
        manifest = _manifest(golden)
        target = manifest
        *parents, last = field.split(".")
        for part in parents:
            target = target[int(part)] if part.isdigit() else target[part]
        target[last] = value
        _write_manifest(golden, manifest)
        return MANIFEST

    return mutate


def _link_input(golden: Path) -> str:
    rel = _manifest(golden)["inputs"][0]["file"]
    outside = golden.parent / "outside.png"
    shutil.copy(golden / rel, outside)
    (golden / rel).unlink()
    os.symlink(outside, golden / rel)  # same bytes, same hash: only the link itself is wrong
    return MANIFEST


def _link_inputs_dir(golden: Path) -> str:
    moved = golden.parent / "elsewhere"
    shutil.move(str(golden / "inputs"), moved)
    os.symlink(moved, golden / "inputs")
    return MANIFEST


def _link_manifest(golden: Path) -> str:
    real = golden.parent / "real-manifest.json"
    shutil.move(str(golden / MANIFEST), real)
    os.symlink(real, golden / MANIFEST)
    return MANIFEST


def _link_reference(golden: Path) -> str:
    rel = _manifest(golden)["reference"]["file"]
    real = golden.parent / "real-reference.npy"
    shutil.move(str(golden / rel), real)
    os.symlink(real, golden / rel)
    return MANIFEST


def _empty_dir(golden: Path) -> str:
    shutil.rmtree(golden)
    golden.mkdir()
    return MANIFEST


def _missing_dir(golden: Path) -> str:
    shutil.rmtree(golden)
    return ""


def _delete_one_input(golden: Path) -> str:
    rel = _manifest(golden)["inputs"][7]["file"]
    (golden / rel).unlink()
    return rel


GOLDEN_CASES = {
    # name: (damage the copy -> the file to name, what the message says, the fix it gives)
    "missing": (_missing_dir, "golden set not found", "pass --golden DIR"),
    "empty-dir": (_empty_dir, "missing, so", "export-check golden record"),
    "input-deleted": (_delete_one_input, "listed in manifest.json but missing", "restore it"),
    "corrupt-image-hash-updated": (_corrupt_image_with_matching_hash, "cannot decode image", "replace the file"),
    "postscript-named-png": (_eps_named_png, "not a decodable PNG/JPEG/BMP/WEBP image", "replace the file"),
    "tampered-image": (_tamper_image, "content changed since recording", "re-record/approve"),
    "tampered-logits": (_tamper_logits, "content changed since recording", "re-record/approve"),
    "version-99": (_set("version", 99), "manifest version 99 is newer", "upgrade export-check"),
    "version-string": (_set("version", "1"), "unknown manifest version '1'", "re-record"),
    "version-0": (_set("version", 0), "unknown manifest version 0", "re-record"),
    "dotdot": (_set("inputs.0.file", "../outside.png"), "points outside the golden folder", "re-record"),
    "dotdot-inside": (_set("inputs.0.file", "inputs/../../x.png"), "points outside the golden folder", "re-record"),
    "absolute": (_set("inputs.0.file", "/etc/hostname.png"), "points outside the golden folder", "re-record"),
    "absolute-reference": (_set("reference.file", "/etc/passwd"), "points outside the golden folder", "re-record"),
    "backslash": (_set("inputs.0.file", "..\\..\\x.png"), "must be a relative path string", "re-record"),
    "nul": (_set("inputs.0.file", "inputs/x\x00.png"), "must be a relative path string", "re-record"),
    "symlinked-input": (_link_input, "is a symbolic link", "store the real file"),
    "symlinked-inputs-dir": (_link_inputs_dir, "is a symbolic link", "store the real file"),
    "symlinked-manifest": (_link_manifest, "is a symbolic link", "store the real file"),
    "symlinked-reference": (_link_reference, "is a symbolic link", "store the real file"),
}


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_bad_golden_set_is_refused_naming_the_file(case: str, golden_copy: Path, tmp_path: Path, capfd) -> None:
    damage, says, fix = GOLDEN_CASES[case]
    named = damage(golden_copy)
    out = tmp_path / "out"
    code, stdout, err = run_cli(capfd, *check_argv(DEFAULT_CHECKPOINT, out, golden=golden_copy))
    assert code == 2
    assert_one_line_error(err, str(golden_copy / named) if named else str(golden_copy), says, fix)
    assert stdout == ""
    assert built_files(out) == []


def test_undecodable_image_late_in_the_set_stops_the_run_with_one_line(golden_copy: Path, tmp_path: Path, capfd) -> None:
    """Hashes are checked up front; images are decoded batch by batch, so a bad last image is found
    during replay: still one line naming it, exit 2, and no report claims anything was checked: the
    JSON report is the error form (issue 16.2), no rows, the error and exit code 2."""
    named = _corrupt_image_with_matching_hash(golden_copy, index=-1)
    report = tmp_path / "report.json"
    argv = check_argv(DEFAULT_CHECKPOINT, tmp_path / "out", golden=golden_copy)
    code, _, err = run_cli(capfd, *argv, "--artifacts", "onnx", "--json", report)
    assert code == 2
    assert_one_line_error(err, str(golden_copy / named), "cannot decode image", "replace the file")
    doc = json.loads(report.read_text())
    assert doc["exit_code"] == 2 and doc["passed"] is False and doc["rows"] == [] and "counts" not in doc
    assert f"export-check: error: {doc['error']['message']}" == err.strip()


def test_golden_path_that_is_a_file(tmp_path: Path, capfd) -> None:
    not_a_dir = tmp_path / "golden.json"
    not_a_dir.write_text("{}")
    code, _, err = run_cli(capfd, *check_argv(DEFAULT_CHECKPOINT, tmp_path / "out", golden=not_a_dir))
    assert code == 2
    assert_one_line_error(err, str(not_a_dir), "must be a directory", "pass --golden DIR")


# --- output directory ----------------------------------------------------------------------------


def test_out_dir_under_a_regular_file(tmp_path: Path, capfd) -> None:
    (tmp_path / "file").write_text("x")
    out = tmp_path / "file" / "out"
    code, _, err = run_cli(capfd, *check_argv(DEFAULT_CHECKPOINT, out))
    assert code == 2
    assert_one_line_error(err, str(out), "cannot create the output directory", "pass --out to a writable directory")


def test_out_dir_that_is_a_file(tmp_path: Path, capfd) -> None:
    out = tmp_path / "out"
    out.write_text("x")
    code, _, err = run_cli(capfd, *check_argv(DEFAULT_CHECKPOINT, out))
    assert code == 2
    assert_one_line_error(err, str(out), "cannot create the output directory (File exists)", "pass --out to a writable directory")
    assert out.read_text() == "x"


@pytest.fixture()
def read_only_dir(tmp_path: Path):
    """A read-only tmpfs: root ignores file permissions but not a read-only mount."""
    with mounted_tmpfs(tmp_path / "ro", "ro,size=64k", "the file-as-parent tests cover the error path") as mount:
        yield mount


def test_out_dir_on_a_read_only_filesystem(read_only_dir: Path, tmp_path: Path, capfd) -> None:
    for out in (read_only_dir, read_only_dir / "sub"):
        code, _, err = run_cli(capfd, *check_argv(DEFAULT_CHECKPOINT, out))
        assert code == 2
        assert_one_line_error(err, str(out), "pass --out to a writable directory")


# --- configuration from the repo under test ------------------------------------------------------


def test_settings_values_are_data_never_evaluated_or_run_by_a_shell(tmp_path: Path, capfd, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # the project the run stands in holds the settings (issue 24)
    marker = tmp_path / "ran"
    code = f"__import__('os').system('touch {marker}')"
    (tmp_path / "pyproject.toml").write_text(
        "[tool.export-check]\n"
        f'arch = "{TINY}"\n'
        f'golden = "$(touch {marker})"\n'
        f'out = "`touch {marker}`; {code}"\n'
        f'artifacts = ["{code}"]\n'
        f'[tool.export-check.arch-kwargs]\nnum_classes = "{code}"\n'
    )
    checkpoint = save_state(seeded(TinyNet), tmp_path / "model.pth")
    exit_code, _, err = run_cli(capfd, checkpoint, "-q")
    assert exit_code == 2
    assert_one_line_error(err, "pyproject.toml: artifacts must name kinds or groups: unknown artifact kind")
    assert not marker.exists()
    # the file is refused while it is read, whatever the command line says; without that key the rest is read
    exit_code, _, err = run_cli(capfd, checkpoint, "--artifacts", "onnx", "-q")
    assert exit_code == 2 and not marker.exists()
    assert_one_line_error(err, "unknown artifact kind")
    settings = tmp_path / "pyproject.toml"
    settings.write_text("".join(line for line in settings.read_text().splitlines(keepends=True) if not line.startswith("artifacts")))
    exit_code, _, err = run_cli(capfd, checkpoint, "--artifacts", "onnx", "-q")
    assert exit_code == 2 and not marker.exists()
    assert_one_line_error(err, "arch names code outside the project")  # the test's TinyNet lies outside tmp_path
    exit_code, _, err = run_cli(capfd, checkpoint, "--artifacts", "onnx", "--arch", TINY, "-q")
    assert exit_code == 2 and not marker.exists()
    assert_one_line_error(err, "golden set not found")  # the strings were taken as plain paths


# --- non-finite logits ---------------------------------------------------------------------------


def _strict_json(text: str) -> dict:
    def refuse(constant: str) -> None:
        raise AssertionError(f"the JSON report holds {constant}")

    return json.loads(text, parse_constant=refuse)


def test_nan_in_one_artifact_family_fails_those_rows_whatever_the_gate(tmp_path: Path, digit_images: Path, capfd) -> None:
    """A real model whose int8 builds produce NaN (log of a value int8 rounding pushed below 0)."""
    from PIL import Image

    from fault_arches import LogOfMargin

    spec = Preprocess(size=(32, 32))
    files = sorted(digit_images.glob("*.png"))
    batch = torch.from_numpy(np.stack([preprocess_image(Image.open(f), spec) for f in files]))
    model = seeded(LogOfMargin)
    with torch.no_grad():
        lowest = model.head(model.features(batch)).min(dim=0).values
        model.head.bias -= lowest - 5e-4  # every float output >= 5e-4: log is finite in float
        assert torch.isfinite(model(batch)).all()
    checkpoint = save_state(model, tmp_path / "log_margin.pth")
    golden = tmp_path / "golden"
    code, _, err = run_cli(capfd, "golden", "record", checkpoint, "--arch", LOG_OF_MARGIN, "--inputs", digit_images,
                           "--golden", golden, "--size", "32")
    assert code == 0, err
    report_path = tmp_path / "report.json"
    code, out, err = run_cli(
        capfd, checkpoint, "--arch", LOG_OF_MARGIN, "--golden", golden, "--out", tmp_path / "out", "--no-cache", "-q",
        "--artifacts", "torchscript-trace,torch-int8-dynamic,onnx-int8-dynamic",
        "--int8-max-mae", "1e30", "--int8-min-top1", "0", "--json", report_path,
    )
    assert code == 1, out + err
    report = _strict_json(report_path.read_text())  # valid JSON: no NaN/Infinity literals
    rows = {row["name"]: row for row in report["rows"]}
    assert rows["eager"]["status"] == "pass" and rows["eager"]["metrics"]["mae"] == 0.0
    assert rows["torchscript-trace"]["status"] == "pass" and rows["torchscript-trace"]["metrics"]["nonfinite"] == 0
    for name in ("torch-int8-dynamic", "onnx-int8-dynamic"):
        row = rows[name]
        assert row["status"] == "fail", row
        assert row["metrics"]["nonfinite"] > 0
        assert any("non-finite (NaN/Inf) output values" in reason for reason in row["reasons"])
        assert row["metrics"]["mae"] is None  # infinite error written as null, never as a NaN literal
        assert row["gate"]["max_mae"] == 1e30 and row["gate"]["min_top1"] == 0
    assert report["passed"] is False and report["exit_code"] == 1
    assert "FAIL torch-int8-dynamic" in out and "non-finite" in out


# --- hypothesis: random and mutated bytes --------------------------------------------------------

_REAL_CHECKPOINT = io.BytesIO()
torch.save(seeded(TinyNet).state_dict(), _REAL_CHECKPOINT)
REAL_CHECKPOINT_BYTES = _REAL_CHECKPOINT.getvalue()
_PREFIXES = [b"", b"PK\x03\x04", b"\x80\x02", b"\x80\x04\x95", b"\x93NUMPY", b"\x89PNG\r\n\x1a\n", b"\x10\x00\x00\x00\x00\x00\x00\x00{"]


def _load_bytes(data: bytes, suffix: str = ".pth"):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"fuzzed{suffix}"
        path.write_bytes(data)
        try:
            return load_state_dict(path), None
        except CheckpointError as exc:
            message = str(exc)
            assert message.startswith(str(path)) and "\n" not in message, message
            return None, message


@settings(max_examples=300, deadline=None)
@given(prefix=st.sampled_from(_PREFIXES), body=st.binary(max_size=400), suffix=st.sampled_from([".pth", ".pt", ".safetensors", ".bin"]))
@example(prefix=b"", body=b"\x80\x02}q\x00.", suffix=".pth")  # an empty dict: a pickle, but no tensors
def test_random_bytes_as_a_checkpoint_are_always_a_checkpoint_error(prefix: bytes, body: bytes, suffix: str) -> None:
    state, message = _load_bytes(prefix + body, suffix)
    assert state is None and message


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_mutated_real_checkpoints_load_exactly_or_fail_cleanly(data) -> None:
    raw = bytearray(REAL_CHECKPOINT_BYTES)
    how = data.draw(st.sampled_from(["truncate", "flip", "splice", "zero-run"]))
    at = data.draw(st.integers(0, len(raw) - 1))
    if how == "truncate":
        raw = raw[:at]
    elif how == "flip":
        raw[at] ^= data.draw(st.integers(1, 255))
    elif how == "splice":
        raw[at:at] = data.draw(st.binary(min_size=1, max_size=64))
    else:
        raw[at : at + 64] = bytes(len(raw[at : at + 64]))
    state, _ = _load_bytes(bytes(raw))
    if state is not None:  # a flip inside tensor bytes is undetectable: still a well-formed state_dict
        assert all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items())


_DANGEROUS = [("os", "system"), ("posix", "system"), ("builtins", "eval"), ("builtins", "exec"), ("subprocess", "Popen"),
              ("builtins", "getattr"), ("builtins", "__import__"), ("shutil", "rmtree"), ("webbrowser", "open"),
              ("torch", "load"), ("numpy", "load"), ("pickle", "loads"), ("__builtin__", "eval"), ("nt", "system")]


@settings(max_examples=150, deadline=None)
@given(target=st.sampled_from(_DANGEROUS), protocol=st.sampled_from([0, 2, 4]), opcode=st.sampled_from(["GLOBAL", "STACK_GLOBAL"]),
       in_zip=st.booleans(), wrap=st.sampled_from(["bare", "dict", "list"]))
def test_hand_made_code_pickles_are_always_refused_and_never_run(target, protocol, opcode, in_zip, wrap) -> None:
    with tempfile.TemporaryDirectory() as folder:
        marker = Path(folder) / "ran"
        module, name = target
        arg = f"touch {marker}" if name in ("system", "Popen") else f"__import__('pathlib').Path({str(marker)!r}).touch()"
        if opcode == "GLOBAL" or protocol < 4:
            call = f"c{module}\n{name}\n".encode()
        else:
            call = b"\x8c" + bytes([len(module)]) + module.encode() + b"\x8c" + bytes([len(name)]) + name.encode() + b"\x93"
        encoded = arg.encode()
        call += b"X" + len(encoded).to_bytes(4, "little") + encoded + b"\x85R"
        if wrap == "dict":
            call = b"}X\x01\x00\x00\x00w" + call + b"s"
        elif wrap == "list":
            call = b"]" + call + b"a"
        body = (b"\x80" + bytes([protocol]) if protocol >= 2 else b"") + call + b"."
        if in_zip:
            buffer = io.BytesIO()
            with zipfile.ZipFile(buffer, "w") as archive:
                archive.writestr("ckpt/data.pkl", body)
                archive.writestr("ckpt/version", "3\n")
                archive.writestr("ckpt/byteorder", "little")
            body = buffer.getvalue()
        state, message = _load_bytes(body)
        assert state is None and not marker.exists()
        assert "refused" in message or "not a PyTorch checkpoint" in message, message


SPEC = Preprocess(size=(8, 8))


def _image_bytes(fmt: str, mode: str = "RGB") -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new(mode, (9, 7), 90).save(buffer, format=fmt)
    return buffer.getvalue()


REAL_IMAGES = [(DEFAULT_GOLDEN / read_manifest(DEFAULT_GOLDEN).inputs[0].file).read_bytes(),
               _image_bytes("JPEG"), _image_bytes("BMP"), _image_bytes("WEBP"), _image_bytes("PNG", "LA")]


def _decode(data: bytes, name: str, spec: Preprocess | None = SPEC):
    try:
        array = decode_input(data, name, spec, Path("/golden") / name)
    except GoldenError as exc:
        assert str(exc).startswith(f"/golden/{name}: ") and "\n" not in str(exc), str(exc)
        return None
    assert array.dtype == np.float32 and np.all(np.isfinite(array))
    if spec is not None and not name.endswith(".npy"):
        assert array.shape == (spec.channels, *spec.size)
    return array


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=600), name=st.sampled_from(["x.png", "x.jpg", "x.bmp", "x.webp", "x.npy"]))
def test_random_bytes_as_golden_inputs_are_always_a_golden_error(data: bytes, name: str) -> None:
    assert _decode(data, name) is None


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_mutated_real_images_decode_or_fail_cleanly(data) -> None:
    raw = bytearray(data.draw(st.sampled_from(REAL_IMAGES)))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(raw) - 1))
        how = data.draw(st.sampled_from(["truncate", "flip", "splice"]))
        if how == "truncate":
            raw = raw[: max(at, 1)]
        elif how == "flip":
            raw[at] ^= data.draw(st.integers(1, 255))
        else:
            raw[at:at] = data.draw(st.binary(min_size=1, max_size=16))
    _decode(bytes(raw), "x.png")


@settings(max_examples=100, deadline=None)
@given(shape=st.lists(st.integers(0, 4), max_size=3), dtype=st.sampled_from(["f4", "f8", "i2", "u1", "c8", "?", "U3", "O"]),
       poison=st.sampled_from([None, np.nan, np.inf]))
def test_npy_inputs_of_any_dtype_decode_or_fail_cleanly(shape, dtype, poison) -> None:
    array = np.zeros(shape, dtype=dtype)
    if poison is not None and array.size and array.dtype.kind == "f":
        array.flat[0] = poison
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=True)
    result = _decode(buffer.getvalue(), "x.npy", None)
    assert (result is None) == (dtype in ("c8", "?", "U3", "O") or (poison is not None and array.size > 0 and array.dtype.kind == "f"))


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=10,
)
_keys = st.sampled_from(["size", "mode", "mean", "std", "resize", "interpolation", "other"])
_plausible = st.fixed_dictionaries(
    {"size": st.lists(st.integers(-2, 40) | _json, min_size=0, max_size=3)},
    optional={
        "mode": st.sampled_from(["RGB", "L", "CMYK", "", 1]) | _json,
        "mean": st.lists(st.floats(allow_nan=True) | st.integers(-3, 3), max_size=4) | _json,
        "std": st.lists(st.floats(allow_nan=True, allow_infinity=True) | st.integers(-3, 3), max_size=4) | _json,
        "resize": st.integers(-5, 60) | st.none() | _json,
        "interpolation": st.sampled_from(["bilinear", "bicubic", "nearest", "lanczos"]) | _json,
    },
)


@settings(max_examples=600, deadline=None)
@given(data=_json | st.dictionaries(_keys, _json, max_size=6) | _plausible)
def test_fuzzed_preprocess_specs_build_a_working_spec_or_raise_value_error(data) -> None:
    try:
        spec = Preprocess.from_json(data)
    except ValueError as exc:
        assert "\n" not in str(exc)
        return
    assert all(1 <= s <= MAX_SIDE for s in spec.size) and spec.mode in ("RGB", "L")
    assert all(np.isfinite(spec.mean)) and all(s >= 1e-6 and np.isfinite(s) for s in spec.std)
    assert Preprocess.from_json(json.loads(json.dumps(spec.to_json()))) == spec  # what is recorded reads back
    if max(spec.size) <= 64 and (spec.resize or 0) <= 64:
        array = _decode(REAL_IMAGES[0], "x.png", spec)
        assert array is not None and array.shape == (spec.channels, *spec.size)


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=120), keep=st.integers(0, 400))
def test_mutated_settings_files_parse_or_fail_with_one_usage_error(text: str, keep: int) -> None:
    from export_check.settings import find_settings

    valid = ('[tool.export-check]\narch = "models/resnet.py:ResNet"\ngolden = "golden"\nbatch-size = 8\n'
             'artifacts = ["onnx"]\nmax-mae = 1e-5\n[tool.export-check.preprocess]\nsize = [32, 32]\n')
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "pyproject.toml"
        path.write_text(valid[:keep] + text + valid[keep:], encoding="utf-8")
        try:
            found = find_settings(None, path)
        except UsageError as exc:
            assert str(exc).startswith(str(path)) and "\n" not in str(exc), str(exc)
            return
        assert found["_source"] == str(path)


_TOKENS = ["check", "golden", "record", "verify", "approve", "history", "--arch", "--arch-kwargs", "--golden", "--out",
           "--json", "--artifacts", "--batch-size", "--threads", "--jobs", "--build-timeout", "--max-mae", "--int8-max-mae",
           "--int8-min-top1",
           "--opset", "--onnx-exporter", "--inputs", "--size", "--mode", "--mean", "--std", "--resize", "--config",
           "--no-cache", "-q", "--dry-run", "nan", "inf", "-1", "0", "1e-5", "{}", '{"num_classes": 10}', "[]", "onnx",
           "tflite", "x", "a:b", "/nonexistent/model.pth", "m.py:Net", "models/nonexistent.py:Net", "RGB", "32x", "0.5,0.5"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(argv=st.lists(st.sampled_from(_TOKENS + ["@CKPT", "@GOLDEN", "@TEXT", "@TRUNC", "@OUT"]) | st.text(max_size=10), max_size=7))
def test_fuzzed_argv_with_real_files_never_tracebacks(argv: list[str], fuzz_files: dict[str, str], capfd) -> None:
    argv = [fuzz_files.get(token, token) for token in argv]
    scratch = Path(fuzz_files["@OUT"]).parent / "cwd"  # `--json check` writes an error report named check: not into the checkout
    scratch.mkdir(exist_ok=True)
    try:
        with contextlib.chdir(scratch):
            code = main(argv)
    except SystemExit as exc:  # --help / --version
        assert exc.code == 0
        capfd.readouterr()
        return
    out, err = capfd.readouterr()
    assert code in (0, 1, 2), (argv, out, err)
    assert "Traceback" not in err and "Traceback" not in out
    if code == 2 and not (err == "" and out.startswith("usage:")):  # a bare `export-check` prints its help
        assert err.startswith("export-check: error: ") and err.count("\n") == 1, (argv, err)


@pytest.fixture(scope="module")
def fuzz_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("fuzz-cli")
    (folder / "notes.txt").write_text("hello")
    data = DEFAULT_CHECKPOINT.read_bytes()
    (folder / "half.pth").write_bytes(data[: len(data) // 2])
    (folder / "model.pth").write_bytes(data)
    golden = folder / "golden"
    shutil.copytree(DEFAULT_GOLDEN, golden)
    old = Path.cwd()
    # Copies outside the repo and this cwd: no pyproject.toml settings apply, no token is a valid
    # architecture, so no argv starts a real run or writes a golden set.
    os.chdir(folder)
    try:
        yield {"@CKPT": str(folder / "model.pth"), "@GOLDEN": str(golden), "@TEXT": str(folder / "notes.txt"),
               "@TRUNC": str(folder / "half.pth"), "@OUT": str(folder / "out")}
    finally:
        os.chdir(old)
