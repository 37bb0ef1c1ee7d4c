from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import DEFAULT_GOLDEN, parsed_or_refused
from export_check.errors import GoldenError
from export_check.golden.manifest import MANIFEST, load_golden, parse_manifest, verify_golden


def test_bundled_golden_set_is_real_and_complete() -> None:
    golden = load_golden(DEFAULT_GOLDEN)
    assert len(golden) >= 32
    assert golden.preprocess is not None and golden.preprocess.size == (32, 32)
    reference = golden.reference()
    assert reference.shape == (len(golden), 10) and np.all(np.isfinite(reference))
    assert all(item.label is not None for item in golden.inputs)
    assert {"torch", "onnx", "onnxruntime", "numpy"} <= golden.recorded_with.keys()
    assert len(golden.model["checkpoint_sha256"]) == 64
    assert (DEFAULT_GOLDEN / "PROVENANCE.md").is_file()
    batches = list(golden.batches(10))
    assert [b.shape for _, b in batches][0] == (10, 3, 32, 32)
    assert sum(len(b) for _, b in batches) == len(golden)


def test_tampered_image_is_refused_naming_it(golden_copy: Path) -> None:
    victim = sorted((golden_copy / "inputs").iterdir())[5]
    data = bytearray(victim.read_bytes())
    data[-20] ^= 0xFF
    victim.write_bytes(bytes(data))
    with pytest.raises(GoldenError, match=f"{victim.name}: content changed since recording"):
        load_golden(golden_copy)
    _, problems = verify_golden(golden_copy)
    assert [p.file for p in problems] == [f"inputs/{victim.name}"]


def test_tampered_logits_are_refused(golden_copy: Path) -> None:
    ref = next(golden_copy.glob("reference-*.npy"))
    array = np.load(ref)
    array[0, 0] += 1.0
    np.save(ref, array)
    with pytest.raises(GoldenError, match="reference-.*content changed"):
        load_golden(golden_copy)


def test_a_format_1_reference_is_read_once_per_set_and_each_input_once_per_load(golden_copy: Path) -> None:
    golden = load_golden(golden_copy)  # reads and checks the reference once
    first = golden.reference()
    next(golden_copy.glob("reference-*.npy")).unlink()  # no second read: the set serves what it checked
    assert golden.reference() is first and first.dtype == np.float32 and first.shape == (len(golden), 10)
    np.testing.assert_array_equal(np.stack(golden.reference_samples()["logits"]), first)
    np.testing.assert_array_equal(golden.reference_outputs(3, 2)["logits"], first[3:5])
    sample = golden.load_sample(golden.inputs[7])
    assert list(sample) == ["input"] and sample["input"].shape == (3, 32, 32)
    np.testing.assert_array_equal(golden.load_input(golden.inputs[7]), sample["input"])
    with pytest.raises(GoldenError, match="reference-.*: listed in manifest.json but missing"):
        load_golden(golden_copy)  # a new load reads it again


@pytest.mark.parametrize("evil", ["../outside.png", "/etc/passwd.png", "inputs/../../x.png", "~/x.png"])
def test_manifest_paths_outside_the_folder_are_refused(golden_copy: Path, evil: str) -> None:
    manifest = json.loads((golden_copy / MANIFEST).read_text())
    manifest["inputs"][0]["file"] = evil
    (golden_copy / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(GoldenError, match="outside the golden folder"):
        load_golden(golden_copy)


def test_symlinked_input_is_refused(golden_copy: Path, tmp_path: Path) -> None:
    manifest = json.loads((golden_copy / MANIFEST).read_text())
    target = golden_copy / manifest["inputs"][0]["file"]
    outside = tmp_path / "outside.png"
    outside.write_bytes(target.read_bytes())
    target.unlink()
    os.symlink(outside, target)
    with pytest.raises(GoldenError, match="symbolic link"):
        load_golden(golden_copy)


def test_unknown_manifest_version(golden_copy: Path) -> None:
    manifest = json.loads((golden_copy / MANIFEST).read_text())
    manifest["version"] = 99
    (golden_copy / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(GoldenError, match="newer than this export-check reads"):
        load_golden(golden_copy)


def _manifest_values():
    scalars = st.none() | st.booleans() | st.integers(-5, 10**6) | st.floats(allow_nan=False) | st.text(max_size=20)
    return st.recursive(
        scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4), max_leaves=12
    )


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    mutation=st.sampled_from(["drop", "replace", "retype"]),
    key=st.sampled_from(["format", "version", "preprocess", "inputs", "reference", "model", "recorded_with", "created"]),
    value=_manifest_values(),
    index=st.integers(0, 3),
    subkey=st.sampled_from(["file", "sha256", "label", "name", "size", "mode", "mean", "std", "shape", "resize"]),
)
def test_fuzzed_manifests_fail_only_with_golden_error(tmp_path: Path, mutation, key, value, index, subkey) -> None:
    """Any damage to a manifest is a one-line GoldenError or a valid set, never another exception."""
    manifest = json.loads((DEFAULT_GOLDEN / MANIFEST).read_text())
    if mutation == "drop":
        manifest.pop(key, None)
    elif mutation == "replace":
        manifest[key] = value
    else:
        target = manifest.get(key)
        if isinstance(target, list) and target:
            target = target[index % len(target)]
        if isinstance(target, dict):
            target[subkey] = value
        else:
            manifest[key] = value
    golden = parsed_or_refused(tmp_path, manifest)
    assert golden is None or len(golden.inputs) >= 1


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=200) | st.binary(max_size=200).map(lambda b: b.decode("latin-1")))
def test_garbage_manifest_text(text: str) -> None:
    with pytest.raises(GoldenError):
        parse_manifest(Path("/g"), text)


# --- the format-2 API on a format-1 set: the same batches, the same logits ----------------------------


def test_format_1_set_offers_the_format_2_api_unchanged() -> None:
    from export_check.golden.batches import GoldenBatches
    from export_check.signature import SINGLE

    golden = load_golden(DEFAULT_GOLDEN)
    assert golden.version == 1 and golden.signature == SINGLE and golden.recording == {}
    reference = golden.reference()
    batches = list(golden.batches(10))
    feeds = list(golden.feed_batches(10))
    assert [start for start, _ in feeds] == [start for start, _ in batches]
    for (_, batch), (start, fed) in zip(batches, feeds, strict=True):
        assert list(fed) == ["input"]
        np.testing.assert_array_equal(fed["input"], batch)
        out = golden.reference_outputs(start, len(batch))
        assert list(out) == ["logits"]
        np.testing.assert_array_equal(out["logits"], reference[start : start + len(batch)])
    assert golden.load_sample(golden.inputs[0]).keys() == {"input"}
    samples = golden.reference_samples()
    assert list(samples) == ["logits"] and len(samples["logits"]) == len(golden)
    held = GoldenBatches(golden, 10)
    assert list(held.first) == ["input"] and held.first["input"].shape == (10, 3, 32, 32)
    head, count = held.head(25)
    assert count == 25 and list(head) == ["input"]
    np.testing.assert_array_equal(head["input"], np.concatenate([b for _, b in batches])[:25])
    np.testing.assert_array_equal(held.at(20)["input"], batches[2][1])


def test_stack_batches_end_at_the_batch_size_or_a_change_of_shape() -> None:
    from export_check.golden.manifest import stack_batches
    from export_check.signature import InputSpec

    inputs = (InputSpec("x", "float32", batch_axis=1), InputSpec("ids", "int64"))
    lengths = [3, 3, 3, 5, 3, 3]
    samples = [{"x": np.full((n, 2), i, np.float64), "ids": np.arange(n)} for i, n in enumerate(lengths)]
    got = [(start, feeds["x"].shape, feeds["x"].dtype, feeds["ids"].shape) for start, feeds in stack_batches(samples, inputs, 2)]
    assert got == [(0, (3, 2, 2), np.float32, (2, 3)), (2, (3, 1, 2), np.float32, (1, 3)), (3, (5, 1, 2), np.float32, (1, 5)),
                   (4, (3, 2, 2), np.float32, (2, 3))]
    first = next(stack_batches(samples, inputs, 2))[1]
    np.testing.assert_array_equal(first["x"][:, 1], samples[1]["x"])  # the batch axis is axis 1


# --- checked_golden: the set as a check compares it, the run's settings applied and checked -----------------------


def test_checked_golden_applies_the_settings_and_serves_the_references_it_checked(golden_copy: Path) -> None:
    from export_check.golden.manifest import checked_golden
    from export_check.signature import SINGLE, SignatureSettings

    plain = checked_golden(golden_copy, SignatureSettings())
    assert plain.signature is SINGLE and len(plain) == len(load_golden(DEFAULT_GOLDEN))
    values = checked_golden(golden_copy, SignatureSettings(outputs={"logits": {"kind": "values"}}))
    assert [(o.name, o.kind) for o in values.signature.outputs] == [("logits", "values")]
    next(golden_copy.glob("reference-*.npy")).unlink()  # read and checked by the load: not read again
    assert values.reference().shape == (len(values), 10)


def test_checked_golden_refuses_settings_the_set_cannot_take_in_one_line(golden_copy: Path) -> None:
    from export_check.errors import UsageError
    from export_check.golden.manifest import checked_golden
    from export_check.signature import SignatureSettings

    with pytest.raises(UsageError) as info:
        checked_golden(golden_copy, SignatureSettings(outputs={"boxes": {"kind": "values"}}))
    assert str(info.value) == (f"{golden_copy}: settings name outputs boxes, the golden set has logits; "
                               "fix [tool.export-check.outputs.NAME]")
    with pytest.raises(UsageError) as info:  # a blank for a classifier's logits (10 classes, no frames)
        checked_golden(golden_copy, SignatureSettings(outputs={"logits": {"ctc_blank": 3}}))
    assert str(info.value).startswith(f"{golden_copy / MANIFEST}: ctc-blank is for a sequence-logits output")
    assert str(info.value).endswith("fix ctc-blank in [tool.export-check.outputs.logits]")
    manifest = json.loads((golden_copy / MANIFEST).read_text())
    manifest["reference"]["sha256"] = "0" * 64  # a damaged set is refused before its settings are looked at
    (golden_copy / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(GoldenError, match="content changed since recording"):
        checked_golden(golden_copy, SignatureSettings(outputs={"boxes": {"kind": "values"}}))


def test_checked_golden_refuses_a_compared_output_that_holds_no_values(tmp_path: Path) -> None:
    from export_check.golden.manifest import checked_golden
    from export_check.golden.store import NewInput, npz_bytes, write_golden_v2
    from export_check.signature import InputSpec, OutputSpec, Signature, SignatureSettings

    signature = Signature(inputs=(InputSpec("x"),), outputs=(OutputSpec("logits"), OutputSpec("boxes", kind="values")))
    inputs = [NewInput(f"s{i}.npz", npz_bytes({"x": np.full(3, i, dtype=np.float32)})) for i in range(3)]
    reference = {"logits": [np.eye(4, dtype=np.float32)[i] for i in range(3)], "boxes": [np.zeros((0, 4), np.float32)] * 3}
    write_golden_v2(tmp_path, inputs, None, signature, reference, {"batch_size": 3, "mode": "eval"}, {}, {})
    with pytest.raises(GoldenError) as info:
        checked_golden(tmp_path, SignatureSettings())
    assert str(info.value).startswith(f"{tmp_path / MANIFEST}: output boxes holds no values (shape (0, 4) per sample)")
    assert str(info.value).endswith("or set compare = false in [tool.export-check.outputs.boxes]")
    golden = checked_golden(tmp_path, SignatureSettings(outputs={"boxes": {"compared": False}}))  # left out: nothing to refuse
    assert [o.name for o in golden.signature.compared_outputs()] == ["logits"]
    np.testing.assert_array_equal(golden.reference_outputs(0, 3)["logits"], np.eye(4, dtype=np.float32)[:3])
