"""The memory layout an app feeds each input: part of the signature (``[tool.export-check.model-inputs.NAME]
layout = "channels-last"``; default ``contiguous``, as the eager model is fed), fed to every file whose runtime
takes a strided tensor (the torch runtimes, ExecuTorch), and exported into the on-device files.

Why it matters: an ExecuTorch ``.pte`` records the dim order each input was exported with, and its runtime does not
check what it is fed. A channels-last file fed plain NCHW (or the reverse) runs and returns numbers off by the whole
signal (MAE 1.93 on the bundled ResNet, no error: pytorch/executorch#21837). So the tool feeds every file the app's
layout, and a file that records another one and fails its gate fails with that cause (:func:`mismatch_sentence`).
The runtimes that take a numpy array (onnxruntime, OpenVINO, LiteRT, Core ML) read its values by index, whatever its
memory order: for them the layout changes nothing.

>>> dim_order("channels-last", 4), dim_order("contiguous", 3), layout_of((0, 2, 3, 1)), layout_of((1, 0, 2, 3))
((0, 2, 3, 1), (0, 1, 2), 'channels-last', 'dim order 1,0,2,3')
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

LAYOUTS = ("contiguous", "channels-last")
DEFAULT_LAYOUT = "contiguous"
ISSUE = "pytorch/executorch#21837"


def dim_order(layout: str, ndim: int) -> tuple[int, ...]:
    """The dim order (outermost axis in memory first) of ``layout`` for an ``ndim``-D input: contiguous is
    ``(0, 1, ..., ndim-1)``; channels-last moves the channel axis (1) innermost, ``(0, 2, 3, 1)`` for NCHW. A
    channels-last input needs a batch, a channel and at least one spatial axis: ``ValueError`` otherwise."""
    if layout == DEFAULT_LAYOUT:
        return tuple(range(ndim))
    if layout != "channels-last":
        raise ValueError(f"unknown layout {layout!r}; one of {', '.join(LAYOUTS)}")
    if ndim < 3:
        raise ValueError(f"layout channels-last needs an input with a channel axis and a spatial one (N, C, H, W); this one is {ndim}-D")
    return (0, *range(2, ndim), 1)


def fed_layouts(signature: Any) -> list[str]:
    """The layout the app feeds each input of ``signature``, positional inputs first, then keyword ones (a program's order)."""
    specs = signature.inputs
    return [i.layout for i in specs if not i.keyword] + [i.layout for i in specs if i.keyword]


def json_layout(value: object, where: str) -> str:
    """An input's layout as a manifest or bundle records it; ``ValueError`` naming ``where`` for anything else."""
    if value not in LAYOUTS:
        raise ValueError(f"{where}: an input's layout must be one of {', '.join(LAYOUTS)}, got {value!r}")
    return str(value)


def layout_of(order: Iterable[int]) -> str:
    """How a dim order is named: ``contiguous``, ``channels-last``, or the order itself."""
    order = tuple(order)
    for layout in LAYOUTS:
        if (len(order) >= 3 or layout == DEFAULT_LAYOUT) and order == dim_order(layout, len(order)):
            return layout
    return "dim order " + ",".join(map(str, order))


def shown(layout: str, ndim: int = 4) -> str:
    """``contiguous NCHW``, ``channels-last (NHWC in memory)`` for a 4-D input; the name alone otherwise."""
    if ndim != 4:
        return layout
    return {"contiguous": "contiguous NCHW", "channels-last": "channels-last (NHWC in memory)"}.get(layout, layout)


def mismatch_sentence(name: str, needs: str, fed: str, file: str) -> str:
    """Why a file that records layout ``needs`` for input ``name`` and is fed ``fed`` (the app's) computes wrong
    numbers, and the fix.

    >>> mismatch_sentence("x", "channels-last", "contiguous", "model.pte")[:97]
    'model.pte was exported for input x in channels-last (NHWC in memory) and the app feeds contiguous'
    """
    return (f"{file} was exported for input {name} in {shown(needs)} and the app feeds {shown(fed)} "
            f"([tool.export-check.model-inputs.{name}] layout, default the eager model's: contiguous): its runtime does not "
            f"check the layout it is fed and computes with the wrong one, without an error ({ISSUE}); export it with an "
            f"example in the app's layout ({_example(fed)}), or set layout = \"{needs}\" if the app feeds that")


def _example(layout: str) -> str:
    return "x.contiguous(memory_format=torch.channels_last)" if layout == "channels-last" else "x.contiguous()"


# The row details an on-device kind records (executorch_pte.layout_details): the layout fed per input and, when the file
# records another, the sentence that is the cause of a failing row.
FED = "fed_layout"
MISMATCH = "layout_mismatch"


def layout_details(file: str, names: Iterable[str], fed: Iterable[str], orders: Iterable[tuple[int, ...]]) -> dict[str, str]:
    """A file's layout details: ``fed_layout``, the layout the app feeds each input (``names``, ``fed``), and, when the
    file records (``orders``, its inputs' dim orders) another one, ``layout_mismatch``: the sentence of the first.

    >>> layout_details("m.pte", ["x"], ["contiguous"], [(0, 1, 2, 3)])
    {'fed_layout': 'x: contiguous'}
    """
    names, fed, orders = list(names), list(fed), list(orders)
    if not names or len(names) != len(fed) or len(fed) != len(orders):
        return {}
    found = {FED: "; ".join(f"{name}: {layout}" for name, layout in zip(names, fed, strict=True))}
    for name, layout, order in zip(names, fed, orders, strict=True):
        needs = layout_of(order)
        if needs != layout:
            found[MISMATCH] = mismatch_sentence(name, needs, layout, file)
            break
    return found


def layout_reasons(details: dict[str, str], failed: bool) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(reasons, notes) a row's layout details add: a row that fails its gate while its file records another layout than
    the app's fails with that cause; one that passes all the same says so in a note (its file computes the same
    when fed the app's layout)."""
    sentence = details.get(MISMATCH)
    if not sentence:
        return (), ()
    if failed:
        return (f"cause: {sentence}",), ()
    return (), (f"{sentence.split(' ([tool.')[0]}; fed the app's layout it computes the same all the same (within the gate)",)
