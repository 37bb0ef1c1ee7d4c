"""The golden set lifecycle as a user lives it: record from their own photos or tensors, verify,
tamper, approve a retrained checkpoint, and the check's verdict before and after."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from export_check.cli import main
from export_check.errors import UsageError
from export_check.golden.inputs import Preprocess, preprocess_file
from export_check.golden.manifest import MANIFEST, load_golden, read_manifest
from export_check.golden.preprocess import preprocess_from_args
from user_project import PREPROCESS, UserModels, eager_logits, train_mlp, write_digit_vectors, write_netdef

pytest_plugins = ["user_project_fixtures"]

ARCH = ["--arch", "netdef.py:SmallNet"]
SPEC = Preprocess.from_json(PREPROCESS)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture()
def project(user_models: UserModels, tmp_path: Path, monkeypatch) -> Path:
    folder = user_models.project(tmp_path / "user")
    monkeypatch.chdir(folder)
    return folder


def _record(capsys, checkpoint: str = "model.pth", *extra: str) -> tuple[int, str, str]:
    return run(capsys, "golden", "record", checkpoint, *ARCH, "--inputs", "photos", "--size", "16", "--golden", "golden", "-q", *extra)


def _files(folder: Path) -> dict[str, tuple[bytes, int, int]]:
    """Every file under ``folder``: relative POSIX path -> (bytes, inode, mtime in ns). A file rewritten
    with the same bytes (the manifest's "created" has one-second resolution) still shows: the golden
    writer replaces files by renaming a new one over them, which gives a new inode and mtime."""
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            st = p.stat()
            out[p.relative_to(folder).as_posix()] = (p.read_bytes(), st.st_ino, st.st_mtime_ns)
    return out


def test_record_decodes_every_photo_format_into_the_true_logits(project: Path, user_models: UserModels, capsys) -> None:
    code, out, _ = _record(capsys)
    assert code == 0 and "recorded 8 inputs and their reference logits (8, 10) into golden" in out
    golden = load_golden(project / "golden")
    assert [item.name for item in golden.inputs] == list(user_models.photo_names)
    assert golden.preprocess == SPEC
    # the stored reference is this checkpoint's logits on the user's original files
    photos = [preprocess_file(project / "photos" / n, SPEC) for n in user_models.photo_names]
    expected = eager_logits(project / "netdef.py", "SmallNet", project / "model.pth", photos)
    np.testing.assert_allclose(golden.reference(), expected, atol=1e-5)
    assert golden.model["checkpoint_sha256"] == hashlib.sha256((project / "model.pth").read_bytes()).hexdigest()
    # every odd format became the same 3x16x16 input, decoded the way a viewer shows it
    arrays = {item.name: golden.load_input(item) for item in golden.inputs}
    assert {a.shape for a in arrays.values()} == {(3, 16, 16)}
    from PIL import Image

    from export_check.golden.inputs import preprocess_image

    def opened(name: str):
        with Image.open(project / "photos" / name) as img:
            img.load()
            return img

    cutout = opened("cutout.png")
    assert cutout.mode == "RGBA"
    # the corners are transparent over black pixels: composited onto white (+1 after normalising), not black (-1)
    assert np.asarray(cutout.getchannel("A"))[0, 0] == 0 and cutout.getpixel((0, 0))[:3] == (0, 0, 0)
    np.testing.assert_allclose(arrays["cutout.png"][:, 0, 0], 1.0, atol=1e-6)
    palette = opened("chelsea.png")
    assert palette.mode == "P"
    np.testing.assert_allclose(arrays["chelsea.png"], preprocess_image(palette.convert("RGB"), SPEC), atol=1e-6)
    assert opened("moon16.png").mode.startswith("I")
    import skimage.data

    moon8 = preprocess_image(Image.fromarray(skimage.data.moon()), SPEC)
    np.testing.assert_allclose(arrays["moon16.png"], moon8, atol=2 / 255 / 0.5)  # 16-bit scaled down, not clipped
    assert arrays["camera.png"][0].tolist() == arrays["camera.png"][2].tolist()  # grayscale -> equal channels


def test_record_refuses_to_replace_a_golden_set_without_force(project: Path, user_models: UserModels, capsys) -> None:
    assert _record(capsys)[0] == 0
    manifest = (project / "golden" / MANIFEST).read_bytes()
    code, _, err = _record(capsys, str(user_models.v2))
    assert code == 2 and "golden: already holds a golden set" in err and "golden approve" in err and "--force" in err
    assert (project / "golden" / MANIFEST).read_bytes() == manifest
    code, _, _ = _record(capsys, str(user_models.v2), "--force")
    assert code == 0
    assert read_manifest(project / "golden").model["checkpoint"] == "v2.pth"
    # no files of the replaced set are left behind
    assert len(list((project / "golden").glob("reference-*.npy"))) == 1
    assert len(list((project / "golden" / "inputs").iterdir())) == 8


def test_record_never_writes_into_a_folder_that_is_not_a_golden_set(project: Path, capsys) -> None:
    (project / "notes").mkdir()
    (project / "notes" / "todo.txt").write_text("mine")
    photos = sorted((p.name, p.read_bytes()) for p in (project / "photos").iterdir())
    code, _, err = run(capsys, "golden", "record", "model.pth", *ARCH, "--inputs", "photos", "--size", "16", "--golden", "notes", "--force")
    assert code == 2 and "notes: not empty and holds no manifest.json" in err
    code, _, err = run(capsys, "golden", "record", "model.pth", *ARCH, "--inputs", "photos", "--size", "16", "--golden", ".")
    assert code == 2 and "inputs are inside the golden folder" in err
    # a golden folder inside the inputs folder is fine: only files directly in the inputs folder are read
    assert run(capsys, "golden", "record", "model.pth", *ARCH, "--inputs", "photos", "--size", "16", "--golden", "photos/g")[0] == 0
    assert sorted((p.name, p.read_bytes()) for p in (project / "photos").iterdir() if p.is_file()) == photos
    assert (project / "notes" / "todo.txt").read_text() == "mine"


def test_record_tamper_restore_approve_then_the_check_passes(project: Path, user_models: UserModels, capsys, tmp_path: Path) -> None:
    check = ["--golden", "golden", "--artifacts", "onnx", "--out", str(tmp_path / "out"), "-q"]
    assert _record(capsys)[0] == 0
    code, out, _ = run(capsys, "golden", "verify", "golden")
    assert code == 0 and "golden set golden: OK (8 inputs, reference (8, 10), every hash matches)" in out
    assert run(capsys, "model.pth", *ARCH, *check)[0] == 0

    # tamper one image: verify names it, the check refuses to start
    victim = next((project / "golden" / "inputs").glob("camera.*.png"))
    original = victim.read_bytes()
    victim.write_bytes(original[:-8] + bytes(b ^ 0xFF for b in original[-8:]))
    code, out, _ = run(capsys, "golden", "verify", "golden")
    assert code == 1
    assert f"CHANGED     camera.png (inputs/{victim.name}): content changed since recording" in out
    assert out.count("CHANGED") == 1 and "1 problem(s) in 8 inputs" in out
    code, _, err = run(capsys, "model.pth", *ARCH, *check)
    assert code == 2 and f"{victim.name}: content changed since recording" in err

    victim.write_bytes(original)
    assert run(capsys, "golden", "verify", "golden")[0] == 0

    # a retrained checkpoint fails on the eager row...
    shutil.copy(user_models.v2, project / "model.pth")
    code, out, _ = run(capsys, "model.pth", *ARCH, *check)
    assert code == 1 and re.search(r"FAIL eager: MAE [\d.]+ > 1e-05", out)
    assert re.search(r"^PASS\s+onnx\s", out, re.M)  # the table: verdict first

    # ...approve shows the diff (checked against logits computed here) and then it passes
    inputs = [preprocess_file(project / "photos" / n, SPEC) for n in user_models.photo_names]
    old = eager_logits(project / "netdef.py", "SmallNet", user_models.v1, inputs)
    new = eager_logits(project / "netdef.py", "SmallNet", user_models.v2, inputs)
    flipped = [n for n, a, b in zip(user_models.photo_names, old.argmax(1), new.argmax(1), strict=True) if a != b]
    assert flipped, "the retrained model should change some top-1 classes on these photos"

    before = _files(project / "golden")
    code, out, _ = run(capsys, "golden", "approve", "model.pth", *ARCH, "--golden", "golden", "--dry-run")
    assert code == 0 and "dry run: golden set unchanged" in out
    assert _files(project / "golden") == before

    code, out, _ = run(capsys, "golden", "approve", "model.pth", *ARCH, "--golden", "golden")
    assert code == 0 and "approved: golden now holds the logits of model.pth" in out
    mae = float(re.search(r"MAE old->new reference: (\S+) ", out).group(1))
    assert mae == pytest.approx(float(np.mean(np.abs(new - old))), rel=1e-3)
    assert f"top-1 changes on {len(flipped)} of 8 inputs" in out
    for name in flipped:
        i = user_models.photo_names.index(name)
        assert f"  {name}: top-1 {old[i].argmax()} -> {new[i].argmax()} (MAE " in out
    assert out.count(": top-1 ") == len(flipped)
    np.testing.assert_allclose(load_golden(project / "golden").reference(), new, atol=1e-5)
    approved = _files(project / "golden")
    assert approved[MANIFEST][0] != before[MANIFEST][0]

    code, out, _ = run(capsys, "model.pth", *ARCH, *check)
    assert code == 0 and "PASSED: 2 passed" in out
    # approving the same weights again writes nothing: every file of the approved set is the same file, byte for byte
    code, out, _ = run(capsys, "golden", "approve", "model.pth", *ARCH, "--golden", "golden")
    assert code == 0 and "nothing to approve" in out and "approved:" not in out
    assert _files(project / "golden") == approved


def test_verify_says_missing_undecodable_and_notes_stray_files(project: Path, capsys) -> None:
    assert _record(capsys)[0] == 0
    root = project / "golden"
    (root / "inputs" / "stray.png").write_bytes((project / "photos" / "camera.png").read_bytes())
    code, out, _ = run(capsys, "golden", "verify", "golden")
    assert code == 0 and "note: inputs/stray.png is not listed in manifest.json" in out

    manifest = json.loads((root / MANIFEST).read_text())
    by_name = {entry["name"]: entry for entry in manifest["inputs"]}
    (root / by_name["rocket.jpg"]["file"]).unlink()
    # a hand edit that keeps the hash consistent but leaves an image nobody can decode
    broken = (root / by_name["coffee.jpg"]["file"]).read_bytes()[:200]
    (root / by_name["coffee.jpg"]["file"]).write_bytes(broken)
    by_name["coffee.jpg"]["sha256"] = hashlib.sha256(broken).hexdigest()
    (root / MANIFEST).write_text(json.dumps(manifest))
    code, out, _ = run(capsys, "golden", "verify", "golden")
    assert code == 1 and "2 problem(s) in 8 inputs" in out
    assert f"MISSING     rocket.jpg ({by_name['rocket.jpg']['file']}): listed in manifest.json but missing" in out
    assert f"UNDECODABLE coffee.jpg ({by_name['coffee.jpg']['file']}): cannot decode image" in out


def test_npy_golden_set_for_a_model_without_images(tmp_path: Path, monkeypatch, capsys) -> None:
    """A digits MLP on raw 64-float vectors: the golden set stores the .npy tensors, no preprocessing."""
    monkeypatch.chdir(tmp_path)
    write_netdef(tmp_path)
    labels = write_digit_vectors(tmp_path / "vectors", count=24)
    train_mlp(tmp_path, tmp_path / "mlp1.pth", epochs=3, seed=0)
    train_mlp(tmp_path, tmp_path / "mlp2.pth", epochs=1, seed=5, start_from=tmp_path / "mlp1.pth")
    arch = ["--arch", "netdef.py:DigitsMLP"]
    code, out, _ = run(capsys, "golden", "record", "mlp1.pth", *arch, "--inputs", "vectors", "--golden", "golden")
    assert code == 0 and "(24, 10)" in out
    golden = load_golden(tmp_path / "golden")
    assert golden.preprocess is None and all(item.file.endswith(".npy") for item in golden.inputs)
    assert golden.labels() == [labels[item.name] for item in golden.inputs]
    vectors = [np.load(tmp_path / "vectors" / item.name) for item in golden.inputs]
    old = eager_logits(tmp_path / "netdef.py", "DigitsMLP", tmp_path / "mlp1.pth", vectors)
    np.testing.assert_allclose(golden.reference(), old, atol=1e-5)
    accuracy = float(np.mean(old.argmax(1) == np.asarray(golden.labels())))
    assert accuracy >= 0.75  # a real classifier of these digits

    code, out, _ = run(capsys, "mlp1.pth", *arch, "--golden", "golden", "--artifacts", "onnx,torch-int8-dynamic", "--out", "out", "-q")
    assert code == 0, out
    assert f"eager top-1 accuracy on the golden labels: {accuracy:.1%}" in out

    new = eager_logits(tmp_path / "netdef.py", "DigitsMLP", tmp_path / "mlp2.pth", vectors)
    new_accuracy = float(np.mean(new.argmax(1) == np.asarray(golden.labels())))
    code, out, _ = run(capsys, "golden", "approve", "mlp2.pth", *arch, "--golden", "golden")
    assert code == 0 and f"accuracy on labels: {accuracy:.1%} -> {new_accuracy:.1%}" in out
    assert run(capsys, "mlp2.pth", *arch, "--golden", "golden", "--artifacts", "onnx", "--out", "out", "-q")[0] == 0
    assert run(capsys, "mlp1.pth", *arch, "--golden", "golden", "--artifacts", "onnx", "--out", "out", "-q")[0] == 1


def test_record_refuses_inputs_it_cannot_batch(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    write_netdef(tmp_path)
    train_mlp(tmp_path, tmp_path / "mlp.pth", epochs=0)
    (tmp_path / "in").mkdir()
    np.save(tmp_path / "in" / "a.npy", np.zeros(64, np.float32))
    np.save(tmp_path / "in" / "b.npy", np.zeros(65, np.float32))
    code, _, err = run(capsys, "golden", "record", "mlp.pth", "--arch", "netdef.py:DigitsMLP", "--inputs", "in", "--golden", "g")
    assert code == 2 and "b.npy: decodes to shape (65,) but a.npy to (64,)" in err
    shutil.copy(Path(__file__).resolve().parents[2] / "golden" / "PROVENANCE.md", tmp_path / "in" / "x.md")
    (tmp_path / "in" / "b.npy").unlink()
    from PIL import Image

    Image.new("L", (5, 5)).save(tmp_path / "in" / "c.png")
    code, _, err = run(capsys, "golden", "record", "mlp.pth", "--arch", "netdef.py:DigitsMLP", "--inputs", "in", "--golden", "g")
    assert code == 2 and "holds images, so say how to preprocess them" in err
    assert not (tmp_path / "g").exists()


@settings(max_examples=300, deadline=None)
@given(
    size=st.none() | st.text(alphabet="0123456789xX,.- ", max_size=8),
    mode=st.none() | st.sampled_from(["RGB", "L"]),
    mean=st.none() | st.text(alphabet="0123456789,.-e ", max_size=10),
    resize=st.none() | st.integers(-5, 600),
)
def test_preprocess_flags_parse_or_fail_with_usage_error(size, mode, mean, resize) -> None:
    try:
        spec = preprocess_from_args(size, resize, mode, mean, None, None)
    except UsageError as exc:
        assert "\n" not in str(exc)
        return
    if spec is not None:
        assert spec.size[0] >= 1 and spec.size[1] >= 1 and len(spec.mean) == spec.channels


def test_an_approve_that_drops_label_accuracy_past_the_limit_is_refused_and_writes_nothing(golden_copy: Path, tmp_path: Path,
                                                                                          capsys) -> None:
    """The bundled ResNet with its class-0 logit raised by 6 loses accuracy on the golden labels: approving it
    under --max-accuracy-drop 1 shows the diff, refuses in one line (exit 1) and leaves the set as it was;
    --accept-accuracy-drop approves it. The accuracies are the labels counted by hand."""
    import torch

    from conftest import DEFAULT_CHECKPOINT, REPO

    state = torch.load(DEFAULT_CHECKPOINT, weights_only=True)
    state["fc.bias"] = state["fc.bias"] + torch.nn.functional.one_hot(torch.tensor(0), state["fc.bias"].numel()) * 6.0
    damaged = tmp_path / "damaged.pth"
    torch.save(state, damaged)
    golden = load_golden(golden_copy)
    labels = np.asarray(golden.labels())
    old = float((golden.reference().argmax(1) == labels).mean())
    before = (golden_copy / MANIFEST).read_bytes()
    argv = ["golden", "approve", str(damaged), "--arch", f"{REPO / 'models' / 'resnet.py'}:ResNet", "--golden", str(golden_copy)]
    assert main([*argv, "--max-accuracy-drop", "1"]) == 1
    out, err = capsys.readouterr()
    shown = re.search(r"accuracy on labels: ([\d.]+)% -> ([\d.]+)%", out)
    assert shown is not None and float(shown.group(1)) == pytest.approx(100 * old, abs=0.05)
    new = float(shown.group(2)) / 100
    assert old - new > 0.01
    assert err.count("\n") == 1 and "not approved: accuracy on the golden labels drops" in err and "--accept-accuracy-drop" in err, err
    assert (golden_copy / MANIFEST).read_bytes() == before  # nothing written
    assert main([*argv, "--max-accuracy-drop", "1", "--accept-accuracy-drop"]) == 0
    assert "approved:" in capsys.readouterr().out and (golden_copy / MANIFEST).read_bytes() != before
