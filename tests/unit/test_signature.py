"""signature.py: output flattening, the settings tables for inputs and outputs, and a manifest's signature."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from export_check.errors import ArtifactError, UsageError
from export_check.signature import (
    SINGLE,
    InputSpec,
    OutputSpec,
    Signature,
    SignatureSettings,
    choose_kind,
    default_kind,
    flatten_outputs,
    parse_signature_settings,
    signature_from_json,
)


def test_flatten_outputs_names_every_leaf_in_order() -> None:
    assert flatten_outputs(7) == {"": 7}
    assert flatten_outputs((1, 2)) == {"output_0": 1, "output_1": 2}
    assert flatten_outputs({"boxes": [1, 2], "meta": {"score": 3, "ids": (4,)}}) == {
        "boxes.0": 1, "boxes.1": 2, "meta.score": 3, "meta.ids.0": 4}
    assert list(flatten_outputs({"b": 1, "a": 2})) == ["b", "a"]  # the model's order, not sorted


def test_named_tuples_and_dataclasses_are_named_by_their_fields() -> None:
    import dataclasses
    from collections import namedtuple

    Energies = namedtuple("Energies", "energy forces")

    @dataclasses.dataclass
    class Output:  # what torch.export.register_dataclass takes; transformers-style optional fields left None
        logits: Any
        hidden: Any
        loss: Any = None

    assert flatten_outputs(Energies(1, (2, 3))) == {"energy": 1, "forces.0": 2, "forces.1": 3}
    assert flatten_outputs(Output(logits=1, hidden=Energies(2, 3))) == {"logits": 1, "hidden.energy": 2, "hidden.forces": 3}
    assert flatten_outputs({"a": Output(1, 2, loss=4)}) == {"a.logits": 1, "a.hidden": 2, "a.loss": 4}
    assert flatten_outputs([Energies(1, 2)]) == {"output_0.energy": 1, "output_0.forces": 2}
    assert flatten_outputs(Output) == {"": Output}  # the class itself is a leaf (refused later, naming it), not its fields


def test_two_outputs_that_flatten_to_one_name_are_refused() -> None:
    with pytest.raises(ArtifactError, match="both named 'a.b'"):
        flatten_outputs({"a.b": 1, "a": {"b": 2}})


@pytest.mark.parametrize(("ndim", "dtype", "kind"), [
    (2, "float32", "logits"), (3, "float16", "sequence-logits"), (1, "float32", "values"), (4, "float64", "values"),
    (2, "int64", "values"), (2, "bool", "values"),
])
def test_default_kind(ndim: int, dtype: str, kind: str) -> None:
    assert default_kind(ndim, dtype) == kind


@pytest.mark.parametrize(("name", "ndim", "kind"), [
    ("last_hidden_state", 3, "values"), ("pooler_output", 2, "values"), ("extract_features", 3, "values"), ("pred_boxes", 3, "values"),
    ("bbox", 2, "values"), ("landmarks", 2, "values"), ("keypoints.0", 2, "values"), ("image_embeds", 2, "values"),
    ("logits", 2, "logits"), ("box_scores", 2, "logits"), ("logits_per_image", 2, "logits"), ("log_probs", 3, "sequence-logits"),
    ("output_0", 2, "logits"), ("output", 3, "sequence-logits"), ("predBoxes", 2, "values"),
])
def test_an_outputs_name_decides_its_default_kind(name: str, ndim: int, kind: str) -> None:
    assert choose_kind(ndim, "float32", name=name).kind == kind


def test_the_layernorm_statistic_makes_values_unless_the_name_says_logits() -> None:
    assert choose_kind(3, "float32", normalised=True).kind == "values"
    assert choose_kind(2, "float32", name="logits", normalised=True).kind == "logits"
    assert choose_kind(2, "float32", classes=1, name="logits").kind == "values"  # one class: no argmax, whatever the name


def test_settings_tables_become_spec_changes() -> None:
    parsed = parse_signature_settings(
        {"ids": {"dtype": "int64", "batch-axis": 1, "dynamic-axes": {"2": "seq", "0": "batch"}, "keyword": True}},
        {"logits": {"kind": "values", "class-axis": 1, "compare": False, "batch-axis": 0}}, "pyproject.toml")
    assert parsed.apply_input(InputSpec("ids")) == InputSpec("ids", "int64", 1, ((0, "batch"), (2, "seq")), True)
    assert parsed.apply_input(InputSpec("other")) == InputSpec("other")
    checked = parsed.at_check(SINGLE)
    assert checked.outputs == (OutputSpec("logits", kind="values", class_axis=1, compared=False),) and checked.compared_outputs() == ()
    assert SignatureSettings().at_check(SINGLE) is SINGLE


def test_at_check_keeps_the_recorded_axes() -> None:
    recorded = Signature((InputSpec("x"),), (OutputSpec("y", batch_axis=1, dynamic_axes=((0, "t"),)),))
    given = SignatureSettings(outputs={"y": {"batch_axis": 0, "kind": "values"}})
    assert given.at_check(recorded).output("y") == OutputSpec("y", batch_axis=1, kind="values", dynamic_axes=((0, "t"),))


@pytest.mark.parametrize(("inputs", "outputs", "says"), [
    ({"x": {"dtype": "float128"}}, None, "s.toml: model-inputs.x.dtype must be one of"),
    ({"x": {"batch-axis": -1}}, None, "model-inputs.x.batch-axis must be an integer >= 0, got -1"),
    ({"x": {"batch-axis": True}}, None, "got True"),
    ({"x": {"keyword": "yes"}}, None, "model-inputs.x.keyword must be true or false"),
    ({"x": {"shape": 3}}, None, "model-inputs.x: unknown key 'shape'"),
    ({"x": {"layout": "nhwc"}}, None, "model-inputs.x.layout must be one of contiguous, channels-last (the memory layout the app feeds)"),
    ({"x": {"layout": 1}}, None, "got 1"),
    ({"x": {"dynamic-axes": {"one": "seq"}}}, None, "axis 'one' is not an integer"),
    ({"x": {"dynamic-axes": {"1": "not a name"}}}, None, "needs a non-negative number and a symbol name"),
    ({"x": {"dynamic-axes": [1]}}, None, "must be a table of axis"),
    (None, {"y": {"kind": "probabilities"}}, "outputs.y.kind must be one of logits, sequence-logits, values"),
    (None, {"y": {"class-axis": 1.0}}, "outputs.y.class-axis must be an integer"),
    (None, {"y": {"compare": 1}}, "outputs.y.compare must be true or false"),
    (None, {"y": 1}, "s.toml: outputs must be a table of tables"),
])
def test_bad_settings_tables_name_the_key(inputs: Any, outputs: Any, says: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_signature_settings(inputs, outputs, "s.toml")
    assert says in str(info.value) and "\n" not in str(info.value)


def test_a_signature_round_trips_through_its_json() -> None:
    sig = Signature((InputSpec("x", "float16", 1, ((2, "seq"),), True), InputSpec("m", "bool")),
                    (OutputSpec("y", 1, "sequence-logits", 2, ((0, "seq"),), False), OutputSpec("z")))
    assert signature_from_json(sig.to_json(), "m.json") == sig
    assert sig.input_names == ("x", "m") and sig.output_names == ("y", "z")
    with pytest.raises(KeyError):
        sig.output("nope")


def test_the_layout_an_app_feeds_is_part_of_the_signature_at_check_and_in_its_json() -> None:
    """Default contiguous (the eager model's), left out of the JSON so that manifests and cache keys stay as they
    were; a setting applies at check time on any set, the format-1 one too; an input the set lacks is refused."""
    assert SINGLE.inputs[0].layout == "contiguous" and "layout" not in SINGLE.to_json()["inputs"][0]
    given = parse_signature_settings({"input": {"layout": "channels-last"}}, None, "s.toml")
    checked = given.at_check(SINGLE)
    assert checked.inputs[0].layout == "channels-last" and checked.outputs == SINGLE.outputs
    assert checked.to_json()["inputs"][0]["layout"] == "channels-last" and signature_from_json(checked.to_json(), "m.json") == checked
    assert checked.to_json() != SINGLE.to_json()  # the cache keys on it
    with pytest.raises(UsageError, match=r"layout of input x; the golden set's inputs are input: fix \[tool.export-check.model-inputs.x\]"):
        parse_signature_settings({"x": {"layout": "channels-last"}}, None, "s.toml").at_check(SINGLE)
    bad = {**checked.to_json(), "inputs": [{**checked.to_json()["inputs"][0], "layout": "nhwc"}]}
    with pytest.raises(ValueError, match="m.json: an input's layout must be one of contiguous, channels-last, got 'nhwc'"):
        signature_from_json(bad, "m.json")


json_values = st.recursive(st.none() | st.booleans() | st.integers(-3, 40) | st.sampled_from(["x", "float32", "logits", "1", "seq"]),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                               st.sampled_from(["inputs", "outputs", "name", "dtype", "kind", "batch_axis", "class_axis", "dynamic_axes",
                                                "1", "40"]), inner, max_size=4), max_leaves=12)


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_any_json_is_a_signature_or_one_value_error_naming_the_manifest(data: Any) -> None:
    try:
        sig = signature_from_json(data, "m.json")
    except ValueError as exc:
        assert str(exc).startswith("m.json: ")
    else:
        assert sig.inputs and sig.outputs and signature_from_json(sig.to_json(), "m.json") == sig
