"""A model's signature: its named inputs and outputs, their batch axes, dynamic axes and kinds.

A golden set records the signature it was recorded with (format 2; a format-1 set has the implied
``SINGLE``: one float input ``input``, one output ``logits``). Every layer speaks in these names:
runners take ``{input name: array}`` and return ``{output name: array}``, the replay compares each
output on its own, the judge gates each one, and the reports show each one.

Output names are stable: dict keys as they are, a named tuple's or a dataclass's field names,
``output_0``, ``output_1``, ... for positions, and dotted paths for nestings (``boxes.0``). Axes are
numbered on the batched array (batch axis included).

>>> flatten_outputs({"boxes": 1, "extra": (2, 3)})
{'boxes': 1, 'extra.0': 2, 'extra.1': 3}
>>> from collections import namedtuple
>>> flatten_outputs(namedtuple("Out", "energy forces")(1, (2, 3)))
{'energy': 1, 'forces.0': 2, 'forces.1': 3}
>>> default_kind(2, "float32"), default_kind(2, "float32", name="landmarks")
('logits', 'values')
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from .errors import UsageError
from .layouts import LAYOUTS, json_layout

OUTPUT_KINDS = ("logits", "sequence-logits", "values")
INPUT_DTYPES = ("float32", "float64", "float16", "int64", "int32", "int16", "int8", "uint8", "bool")


@dataclass(frozen=True)
class InputSpec:
    """One named input: its dtype, the axis that holds the samples, and the axes whose size may change."""

    name: str
    dtype: str = "float32"
    batch_axis: int = 0
    dynamic_axes: tuple[tuple[int, str], ...] = ()  # (axis, symbol), e.g. ((1, "sequence"),)
    keyword: bool = False  # passed as ``name=value`` rather than by position
    layout: str = "contiguous"  # the memory layout the app feeds (exporter/layouts.py): fed to every file

    def to_json(self) -> dict[str, Any]:
        data = {"name": self.name, "dtype": self.dtype, "batch_axis": self.batch_axis,
                "dynamic_axes": {str(a): s for a, s in self.dynamic_axes}, "keyword": self.keyword}
        return data if self.layout == "contiguous" else {**data, "layout": self.layout}  # manifests and keys as before


@dataclass(frozen=True)
class OutputSpec:
    """One named output: where its samples are, what agreement means for it, whether it is compared."""

    name: str
    batch_axis: int = 0
    kind: str = "logits"  # OUTPUT_KINDS: logits (top-1 per sample), sequence-logits (per position), values
    class_axis: int = -1  # the axis an argmax runs over, for the logits kinds
    dynamic_axes: tuple[tuple[int, str], ...] = ()
    compared: bool = True  # False: recorded and shown as not compared (a setting excludes it)
    # The CTC blank class of a sequence-logits output (``ctc-blank``): its samples are also judged as the
    # text greedy decoding reads (exporter/ctc.py); None: per position only.
    ctc_blank: int | None = None

    def to_json(self) -> dict[str, Any]:
        data = {"name": self.name, "batch_axis": self.batch_axis, "kind": self.kind, "class_axis": self.class_axis,
                "dynamic_axes": {str(a): s for a, s in self.dynamic_axes}, "compared": self.compared}
        # only when declared: the manifests (and cache keys) of outputs without a blank stay as they were
        return data if self.ctc_blank is None else {**data, "ctc_blank": self.ctc_blank}


@dataclass(frozen=True)
class Signature:
    inputs: tuple[InputSpec, ...]
    outputs: tuple[OutputSpec, ...]

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(i.name for i in self.inputs)

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(o.name for o in self.outputs)

    def output(self, name: str) -> OutputSpec:
        for spec in self.outputs:
            if spec.name == name:
                return spec
        raise KeyError(name)

    def compared_outputs(self) -> tuple[OutputSpec, ...]:
        return tuple(o for o in self.outputs if o.compared)

    def to_json(self) -> dict[str, Any]:
        return {"inputs": [i.to_json() for i in self.inputs], "outputs": [o.to_json() for o in self.outputs]}


# The signature every format-1 golden set (and the bundled default) has.
SINGLE = Signature(inputs=(InputSpec("input"),), outputs=(OutputSpec("logits"),))


def positional_names(count: int) -> tuple[str, ...]:
    """The names of ``count`` outputs returned by position: ``output_0``, ``output_1``, ..."""
    return tuple(f"output_{i}" for i in range(count))


def flatten_outputs(out: Any, prefix: str = "") -> dict[str, Any]:
    """A model's output structure as ``{stable name: leaf}``, in a deterministic order.

    A bare leaf is ``{"": leaf}`` at the top; callers name it (``logits`` for format 1).
    """
    items = _named_items(out, prefix)
    if items is None:
        return {prefix: out}
    flat: dict[str, Any] = {}
    for key, value in items:
        name = f"{prefix}.{key}" if prefix else key
        leaves = flatten_outputs(value, name)  # a leaf comes back as {name: value}
        clash = next((n for n in leaves if n in flat), None)
        if clash is not None:  # {"a.b": x, "a": {"b": y}}: one of them would be lost, never compared
            from .errors import ArtifactError

            raise ArtifactError(f"returned two outputs that are both named {clash!r} once nested keys are joined with dots (a key "
                                "holding a dot, or a number key beside a position); rename one, so that every output is recorded and compared")
        flat.update(leaves)
    return flat


def _named_items(out: Any, prefix: str) -> list[tuple[str, Any]] | None:
    """The named parts of a structure (a mapping, a named tuple, a dataclass, a tuple or list), or None for a leaf."""
    import dataclasses

    if isinstance(out, Mapping):
        return [(str(k), v) for k, v in out.items()]
    fields = getattr(out, "_fields", None)
    if isinstance(out, tuple) and isinstance(fields, tuple):  # a named tuple: its fields
        return [(str(k), v) for k, v in zip(fields, out, strict=True)]
    if isinstance(out, (tuple, list)):
        return list(zip(positional_names(len(out)) if not prefix else map(str, range(len(out))), out, strict=True))
    if dataclasses.is_dataclass(out) and not isinstance(out, type):  # torch.export's register_dataclass outputs
        # a field left None is not an output (an optional loss, as transformers' ModelOutput leaves out)
        return [(f.name, getattr(out, f.name)) for f in dataclasses.fields(out) if getattr(out, f.name) is not None]
    return None


# Output names that say what an output holds, read from the name's last word backwards (``pred_boxes`` ->
# boxes, ``logits_per_image`` -> logits, ``last_hidden_state`` -> state). transformers' ModelOutput field
# names (last_hidden_state, pooler_output, hidden_states, extract_features, image_embeds, pred_boxes,
# logits) and what detectors and embedding models commonly call their heads.
VALUE_WORDS = frozenset({
    "hidden", "hiddens", "state", "states", "pooler", "pooled", "embedding", "embeddings", "embed", "embeds", "emb",
    "feature", "features", "feats", "box", "boxes", "bbox", "bboxes", "landmark", "landmarks", "landms", "lmk", "keypoint",
    "keypoints", "kpts", "kps", "coord", "coords", "coordinates", "offset", "offsets", "delta", "deltas", "regression",
    "reg", "attentions", "vector", "vectors", "depth",
})
CLASS_WORDS = frozenset({"logits", "logit", "scores", "cls", "class", "classes", "classification", "conf", "probs",
                         "probabilities", "log_probs", "logprobs"})
# A position (a sample, or a sample's token) "after LayerNorm": its values over the last axis have mean 0 and
# standard deviation 1 within these. Measured on transformers 5 models built from configs (no affine learnt yet):
# |mean| <= 1e-7 and |std - 1| <= 3e-4 on every position (BertModel, ViTModel, Wav2Vec2Model); class logits
# sit far off (|std - 1| >= 0.69 on every head measured: docs/explanation/artifacts-and-gates.md).
NORMALISED_TOLERANCE = 0.01


class KindChoice(NamedTuple):
    kind: str
    why: str  # the rule that chose it, as ``golden record`` prints it


def named_part(name: str) -> str:
    """An output name's last dotted part that is not a position: ``hidden_states.2`` -> ``hidden_states``."""
    parts = [p for p in name.split(".") if not p.isdigit()]
    return parts[-1] if parts else name


def name_says(name: str) -> str | None:
    """``values`` or ``logits`` when an output's name says what it holds (its last dotted part that is not a
    position, read word by word from the end: the head noun comes last), else None.

    >>> name_says("pred_boxes"), name_says("hidden_states.2"), name_says("box_scores"), name_says("output_0")
    ('values', 'values', 'logits', None)
    """
    leaf = named_part(name)
    words = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", leaf).lower()
    parts = [w for w in re.split(r"[^a-z0-9]+", words) if w]
    for i in range(len(parts) - 1, -1, -1):
        pair = "_".join(parts[i:i + 2])
        if pair in CLASS_WORDS:  # log_probs
            return "logits"
        if parts[i] in VALUE_WORDS:
            return "values"
        if parts[i] in CLASS_WORDS:
            return "logits"
    return None


def choose_kind(ndim: int, dtype: str, classes: int = 2, unit_norm: bool = False, name: str = "",
                normalised: bool = False, layer_normed: bool = False, evidence: KindChoice | None = None) -> KindChoice:
    """What agreement means for an output nobody described, and why: the one place a default kind is chosen.

    In order: a non-float output, an output with one value per sample (per position; ``classes`` is the last
    axis' size) or an L2-normalised one (``unit_norm``: an embedding, not a probability distribution) is
    ``values``. Then the name (:func:`name_says`): boxes, landmarks, hidden states, pooled outputs, features,
    embeddings are ``values``; logits and scores keep the shape's default. Then ``normalised``: every
    position has mean 0 and std 1 over its last axis, as LayerNorm leaves hidden states (a transformer's
    ``last_hidden_state`` under any name): ``values``; so is ``layer_normed``, the same after a trained LayerNorm's
    scale and shift (``golden.discover.layer_normed``). Before those, ``evidence`` (``golden.evidence``: the layer that
    returned it, probabilities in its values, the labels it cannot hold, another output holding the classes).
    Else the shape's: a 2-D float output is ``logits``
    (top-1 per sample), a 3-D one ``sequence-logits`` (argmax per position), others ``values``.

    Measured (docs/explanation/artifacts-and-gates.md): statistics beyond these do not separate a box head
    from class logits. A randomly initialised head of either kind has a near-constant spread per sample and one
    argmax for every sample, and a random linear head's outputs can all fall in [0, 1] like sigmoid boxes;
    LayerNorm's affine, once trained, moves a hidden state's spread off 1 (|std - 1| up to 0.37). So the evidence is
    the model's (its layers, its labels, its other outputs), not a statistic; an unnamed regression head with none of
    it (one ``output_0`` from a Linear) stays ``logits``: ``golden record`` prints the setting that changes it.

    >>> choose_kind(2, "float32", name="boxes").kind, choose_kind(3, "float32", normalised=True).kind
    ('values', 'values')
    >>> choose_kind(2, "float32", classes=1).kind, choose_kind(2, "float32", unit_norm=True).kind, choose_kind(3, "float32").kind
    ('values', 'values', 'sequence-logits')
    """
    if not dtype.startswith("float"):
        return KindChoice("values", f"default for a {dtype} output: judged by its error")
    if ndim not in (2, 3):
        return KindChoice("values", f"default for a {ndim}-D output: judged by its error")
    if classes < 2:
        return KindChoice("values", "default: one value per sample (per position): judged by its error")
    if unit_norm:
        return KindChoice("values", "default: each sample has L2 norm 1, an embedding: judged by its error")
    said = name_says(name)
    if said == "values":
        return KindChoice("values", f"default: named {named_part(name)!r}, a regression, hidden state or embedding: "
                                    "judged by its error")
    shape_kind = "logits" if ndim == 2 else "sequence-logits"
    shape_gate = "top-1 per sample" if ndim == 2 else "the argmax per position"
    if said == "logits":
        return KindChoice(shape_kind, f"default for a {ndim}-D float output named {named_part(name)!r}: {shape_gate} is gated")
    if evidence is not None:
        return KindChoice(shape_kind if evidence.kind == "logits" else evidence.kind,
                          f"{evidence.why}: {shape_gate} is gated" if evidence.kind == "logits" else evidence.why)
    if normalised:
        return KindChoice("values", "default: every position has mean 0 and std 1 over its last axis, as after LayerNorm "
                                    "(hidden states): judged by its error")
    if layer_normed:
        return KindChoice("values", "default: every position's values over its last axis meet one exact linear relation, as "
                                    "a LayerNorm's scaled and shifted output does (hidden states): judged by its error")
    return KindChoice(shape_kind, f"default for a {ndim}-D float output: {shape_gate} is gated")


def default_kind(ndim: int, dtype: str, classes: int = 2, unit_norm: bool = False, name: str = "", normalised: bool = False,
                 layer_normed: bool = False) -> str:
    """:func:`choose_kind`'s kind."""
    return choose_kind(ndim, dtype, classes, unit_norm, name, normalised, layer_normed).kind


def kind_said(spec: OutputSpec, why: str) -> str:
    """How ``golden record`` names one output's kind and where it came from (``why``: ``settings``, or the
    :func:`choose_kind` reason).

    >>> kind_said(OutputSpec("embedding", kind="values"), choose_kind(2, "float32", unit_norm=True).why)
    'embedding values (default: each sample has L2 norm 1, an embedding: judged by its error)'
    """
    if spec.ctc_blank is not None:
        why += f"; CTC blank {spec.ctc_blank}: judged on the decoded text"
    return f"{spec.name} {spec.kind} ({why})"


def ctc_problem(spec: OutputSpec, sample_shape: tuple[int, ...]) -> str | None:
    """Why ``spec``'s ``ctc_blank`` cannot be read on an output whose samples have ``sample_shape`` (batch axis
    left out); None when it can (or none is declared). The fix is the caller's to name (the settings' table).

    >>> ctc_problem(OutputSpec("output", batch_axis=1, kind="sequence-logits", ctc_blank=11), (12, 11))
    'ctc-blank 11 of output output is not one of its classes (its class axis -1 has 11: 0..10)'
    """
    if spec.ctc_blank is None:
        return None
    if spec.kind != "sequence-logits":
        return f"ctc-blank is for a sequence-logits output (frames x classes); output {spec.name} is {spec.kind}"
    batched = (*sample_shape[:spec.batch_axis], 1, *sample_shape[spec.batch_axis:])
    if len(batched) != 3:
        return (f"ctc-blank needs one frame axis and one class axis per sample; output {spec.name} has per-sample shape "
                f"{tuple(sample_shape)}")
    if not -3 <= spec.class_axis < 3 or spec.class_axis % 3 == spec.batch_axis:
        return f"output {spec.name} has no class axis {spec.class_axis} to decode (its batch axis is {spec.batch_axis})"
    classes = batched[spec.class_axis]
    if not spec.ctc_blank < classes:
        return (f"ctc-blank {spec.ctc_blank} of output {spec.name} is not one of its classes (its class axis {spec.class_axis} has "
                f"{classes}: 0..{classes - 1})")
    return None


def _axes(value: Any, where: str) -> tuple[tuple[int, str], ...]:
    if not isinstance(value, Mapping):
        raise UsageError(f"{where} must be a table of axis = \"symbol\", e.g. {{ 1 = \"sequence\" }}, got {value!r}")
    out = []
    for axis, symbol in value.items():
        try:
            number = int(axis)
        except (TypeError, ValueError):
            raise UsageError(f"{where}: axis {axis!r} is not an integer") from None
        if number < 0 or not isinstance(symbol, str) or not symbol.isidentifier():
            raise UsageError(f"{where}: axis {axis!r} needs a non-negative number and a symbol name, got {symbol!r}")
        out.append((number, symbol))
    return tuple(sorted(out))


def _int(value: Any, where: str, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise UsageError(f"{where} must be an integer >= {low}, got {value!r}")
    return value


@dataclass(frozen=True)
class SignatureSettings:
    """What a settings file says about inputs and outputs (``[tool.export-check.model-inputs.NAME]``,
    ``[tool.export-check.outputs.NAME]``): applied over what recording discovers."""

    inputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    outputs: dict[str, dict[str, Any]] = field(default_factory=dict)

    def apply_output(self, spec: OutputSpec) -> OutputSpec:
        given = self.outputs.get(spec.name, {})
        return replace(spec, **given) if given else spec

    def at_check(self, signature: Signature) -> Signature:
        """The recorded signature with what a check may change: each output's kind, class axis, CTC blank and
        whether it is compared (its batch and dynamic axes are the recording's, which the reference holds)."""
        layouts = {name: table["layout"] for name, table in self.inputs.items() if "layout" in table}
        unknown = [name for name in layouts if name not in signature.input_names]
        if unknown:
            raise UsageError(f"settings set the layout of input {unknown[0]}; the golden set's inputs are {', '.join(signature.input_names)}: "
                             f"fix [tool.export-check.model-inputs.{unknown[0]}]")
        if signature is SINGLE and not self.outputs.get("logits") and not layouts:
            return signature
        inputs = tuple(replace(spec, layout=layouts[spec.name]) if spec.name in layouts else spec for spec in signature.inputs)
        outputs = []
        for spec in signature.outputs:
            given = {k: v for k, v in self.outputs.get(spec.name, {}).items() if k in ("kind", "class_axis", "compared", "ctc_blank")}
            outputs.append(replace(spec, **given) if given else spec)
        return replace(signature, inputs=inputs, outputs=tuple(outputs))

    def apply_input(self, spec: InputSpec) -> InputSpec:
        given = self.inputs.get(spec.name, {})
        return replace(spec, **given) if given else spec


def parse_signature_settings(inputs: Any, outputs: Any, source: str) -> SignatureSettings:
    """Validate the ``model-inputs`` and ``outputs`` tables of a settings file; every problem names the key."""
    parsed_in: dict[str, dict[str, Any]] = {}
    for name, table in _tables(inputs, f"{source}: model-inputs").items():
        where = f"{source}: model-inputs.{name}"
        entry: dict[str, Any] = {}
        for key, value in table.items():
            if key == "dtype":
                if value not in INPUT_DTYPES:
                    raise UsageError(f"{where}.dtype must be one of {', '.join(INPUT_DTYPES)}, got {value!r}")
                entry["dtype"] = value
            elif key == "batch-axis":
                entry["batch_axis"] = _int(value, f"{where}.batch-axis")
            elif key == "dynamic-axes":
                entry["dynamic_axes"] = _axes(value, f"{where}.dynamic-axes")
            elif key == "keyword":
                if not isinstance(value, bool):
                    raise UsageError(f"{where}.keyword must be true or false, got {value!r}")
                entry["keyword"] = value
            elif key == "layout":
                if value not in LAYOUTS:
                    raise UsageError(f"{where}.layout must be one of {', '.join(LAYOUTS)} (the memory layout the app feeds), got {value!r}")
                entry["layout"] = value
            else:
                raise UsageError(f"{where}: unknown key {key!r}; known keys: dtype, batch-axis, dynamic-axes, keyword, layout")
        parsed_in[name] = entry
    parsed_out: dict[str, dict[str, Any]] = {}
    for name, table in _tables(outputs, f"{source}: outputs").items():
        where = f"{source}: outputs.{name}"
        entry = {}
        for key, value in table.items():
            if key == "batch-axis":
                entry["batch_axis"] = _int(value, f"{where}.batch-axis")
            elif key == "kind":
                if value not in OUTPUT_KINDS:
                    raise UsageError(f"{where}.kind must be one of {', '.join(OUTPUT_KINDS)}, got {value!r}")
                entry["kind"] = value
            elif key == "class-axis":
                if isinstance(value, bool) or not isinstance(value, int):
                    raise UsageError(f"{where}.class-axis must be an integer, got {value!r}")
                entry["class_axis"] = value
            elif key == "dynamic-axes":
                entry["dynamic_axes"] = _axes(value, f"{where}.dynamic-axes")
            elif key == "compare":
                if not isinstance(value, bool):
                    raise UsageError(f"{where}.compare must be true or false, got {value!r}")
                entry["compared"] = value
            elif key == "ctc-blank":
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise UsageError(f"{where}.ctc-blank must be the class index of the CTC blank, an integer >= 0 (e.g. ctc-blank = 0), "
                                     f"got {value!r}")
                entry["ctc_blank"] = value
            else:
                raise UsageError(f"{where}: unknown key {key!r}; known keys: batch-axis, kind, class-axis, dynamic-axes, compare, ctc-blank, "
                                 "and the gate settings of [tool.export-check] (max-mae, int8-max-relative-mae, ...)")
        if entry.get("ctc_blank") is not None and entry.get("kind", "sequence-logits") != "sequence-logits":
            raise UsageError(f"{where}.ctc-blank is for a sequence-logits output (frames x classes), but kind is {entry['kind']!r}; "
                             "drop ctc-blank or set kind = \"sequence-logits\"")
        parsed_out[name] = entry
    return SignatureSettings(inputs=parsed_in, outputs=parsed_out)


def _tables(value: Any, where: str) -> dict[str, dict[str, Any]]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(v, Mapping) for v in value.values()):
        raise UsageError(f"{where} must be a table of tables, one per name (e.g. [tool.export-check.outputs.logits])")
    return {str(k): dict(v) for k, v in value.items()}


def signature_from_json(data: Any, where: str) -> Signature:
    """The signature a format-2 manifest records; raises ``ValueError`` naming what is wrong."""
    if not isinstance(data, Mapping) or not isinstance(data.get("inputs"), list) or not isinstance(data.get("outputs"), list):
        raise ValueError(f"{where}: signature must hold lists of inputs and outputs")
    inputs = []
    for item in data["inputs"]:
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str) or item.get("dtype") not in INPUT_DTYPES:
            raise ValueError(f"{where}: an input needs a name and a dtype of {', '.join(INPUT_DTYPES)}")
        inputs.append(InputSpec(name=item["name"], dtype=item["dtype"], batch_axis=_json_int(item.get("batch_axis", 0), where),
                                dynamic_axes=_json_axes(item.get("dynamic_axes", {}), where), keyword=bool(item.get("keyword", False)),
                                layout=json_layout(item.get("layout", "contiguous"), where)))
    outputs = []
    for item in data["outputs"]:
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str) or item.get("kind") not in OUTPUT_KINDS:
            raise ValueError(f"{where}: an output needs a name and a kind of {', '.join(OUTPUT_KINDS)}")
        class_axis = item.get("class_axis", -1)
        if isinstance(class_axis, bool) or not isinstance(class_axis, int):
            raise ValueError(f"{where}: class_axis of {item['name']} must be an integer")
        blank = item.get("ctc_blank")
        if blank is not None and (isinstance(blank, bool) or not isinstance(blank, int) or blank < 0 or item["kind"] != "sequence-logits"):
            raise ValueError(f"{where}: ctc_blank of {item['name']} must be a class index >= 0 of a sequence-logits output, got {blank!r}")
        outputs.append(OutputSpec(name=item["name"], batch_axis=_json_int(item.get("batch_axis", 0), where), kind=item["kind"],
                                  class_axis=class_axis, dynamic_axes=_json_axes(item.get("dynamic_axes", {}), where),
                                  compared=bool(item.get("compared", True)), ctc_blank=blank))
    names = [i.name for i in inputs] + [o.name for o in outputs]
    if not inputs or not outputs or len(set(i.name for i in inputs)) != len(inputs) or len(set(o.name for o in outputs)) != len(outputs):
        raise ValueError(f"{where}: signature needs at least one input and one output, each name once ({names})")
    return Signature(inputs=tuple(inputs), outputs=tuple(outputs))


def _json_int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 32:
        raise ValueError(f"{where}: an axis must be an integer in 0..31, got {value!r}")
    return value


def _json_axes(value: Any, where: str) -> tuple[tuple[int, str], ...]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}: dynamic_axes must be an object of axis -> symbol")
    out = []
    for axis, symbol in value.items():
        if not isinstance(axis, str) or not axis.isdigit() or int(axis) >= 32 or not isinstance(symbol, str) or not symbol.isidentifier():
            raise ValueError(f"{where}: dynamic axis {axis!r} -> {symbol!r} is not a small axis number and a symbol name")
        out.append((int(axis), symbol))
    return tuple(sorted(out))
