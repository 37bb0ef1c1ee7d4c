"""A golden sample's label: what task accuracy is counted against (``compare.ErrorAccumulator``).

Three forms, in ``labels.json`` (file name -> label) and in the manifest's ``inputs[i].label``:

* an integer: the class of the set's first compared output (its *primary* output, a ``logits`` one);
* an object of output name -> label, for a model with several outputs: ``{"scores": 7}``;
* under an output name, a list of integers: one class per position of a ``sequence-logits`` output
  (a tagger's tokens, a frame classifier's frames), a negative one meaning "no label here" (the
  ``ignore_index`` of a loss), so padding is left out of the count.

>>> check_label({"scores": 7, "tags": [1, -100, 2]}, "labels.json: x.npz")
{'scores': 7, 'tags': (1, -100, 2)}
>>> for_output(7, "scores", primary=True), for_output(7, "boxes", primary=False)
(7, None)
>>> for_output({"tags": (1, 2)}, "tags", primary=False)
(1, 2)
"""

from __future__ import annotations

from typing import Any

Label = int | dict[str, int | tuple[int, ...]]
MAX_POSITIONS = 1 << 20  # labels of one output of one sample
CLASS_RANGE = (-(1 << 31), (1 << 31) - 1)  # what a class may be (below it, compare.LABEL_PAD marks "past this sample's labels")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and CLASS_RANGE[0] <= value <= CLASS_RANGE[1]


def check_label(value: Any, where: str) -> Label | None:
    """``value`` as a label, or a ValueError saying what it must be (``where`` names it)."""
    if value is None or _is_int(value):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        raise ValueError(f"{where}: the class {value} is outside the 32-bit range")
    if not isinstance(value, dict) or not value:
        raise ValueError(f"{where}: a label is an integer class, or an object of output name -> class (or -> a list of classes, one per "
                         "position, negative for none)")
    checked: dict[str, int | tuple[int, ...]] = {}
    for name, label in value.items():
        if _is_int(label):
            checked[name] = label
        elif isinstance(label, list) and label and len(label) <= MAX_POSITIONS and all(_is_int(x) for x in label):
            checked[name] = tuple(label)
        else:
            raise ValueError(f"{where}: the label of output {name!r} must be an integer class or a non-empty list of integer classes "
                             f"(one per position, at most {MAX_POSITIONS:,}; negative: no label at that position)")
    return checked


def label_json(label: Label | None) -> Any:
    """The label as JSON data (a list for positions)."""
    if isinstance(label, dict):
        return {k: list(v) if isinstance(v, tuple) else v for k, v in label.items()}
    return label


def for_output(label: Label | None, output: str, primary: bool) -> int | tuple[int, ...] | None:
    """The label of one output: an integer label belongs to the primary output; an object names its outputs."""
    if isinstance(label, dict):
        return label.get(output)
    return label if primary else None


def primary_output(signature: Any) -> str | None:
    """The output an integer label is the class of: the first compared output, when it is ``logits``."""
    compared = signature.compared_outputs()
    return compared[0].name if compared and compared[0].kind == "logits" else None


def labels_of(labels: list[Label | None], signature: Any, output: str) -> list[int | tuple[int, ...] | None]:
    """Every sample's label of ``output`` (None where a sample has none)."""
    primary = primary_output(signature)
    return [for_output(label, output, output == primary) for label in labels]


def primary_labels(labels: list[Label | None], signature: Any) -> list[int | None]:
    """Every sample's class label of the primary output (None where it has none): the eager accuracy, approve's diff."""
    primary = primary_output(signature)
    if primary is None:
        return [None] * len(labels)
    return [x if isinstance(x, int) else None for x in labels_of(labels, signature, primary)]
