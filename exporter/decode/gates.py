"""The gates of a language model's rows (the judge that applies them is decode/rows.py's ``judge``).

Per family, measured on the bundled decoders (docs/how-to/your-own-language-model.md, "Gates"):

* ``float`` (full forward, and the decode step in .pt2, ONNX, .pte): generations identical to eager's
  on every prompt, and the teacher-forced logit MAE within 1e-5 (the house's float bound);
* ``int8-weight`` (torchao weight-only int8): mean KL to eager within ``INT8_MAX_KL_MEAN`` nats and
  top-1 agreement per position at least ``INT8_MIN_TOP1``; generations may differ (they are reported).
* ``int4-weight`` (torchao weight-only int4, groups of 16): the same bounds at ``INT4_MAX_KL_MEAN`` and ``INT4_MIN_TOP1``.
* ``eager`` against the approved set: the float gate.

The user sets them with the options of ``OPTIONS`` (``export-check check`` and ``judge``, flags and settings keys):
``max-mae`` (the float gate's own option) bounds the float and eager rows' MAE; ``int8-weight-max-kl``,
``int8-weight-min-top1``, ``int4-weight-max-kl`` and ``int4-weight-min-top1`` the weight-only rows. ``judge``
lays the values given now over the gates a report was judged with (``overlaid``) and judges again (rows.judged_again).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..errors import UsageError  # the options table reads OPTIONS: nothing here imports numpy

FLOAT_MAX_MAE = 1e-5
INT8_MAX_KL_MEAN = 1e-3
INT8_MIN_TOP1 = 0.95
INT4_MAX_KL_MEAN = 0.02  # measured over 16 prompts x 32 tokens: 0.0042 (GPT-2 layout), 0.0067 (Llama layout)
INT4_MIN_TOP1 = 0.80  # measured: 92.8% and 86.2%; int4 moves near-ties, generations differ
INT4_GROUP_SIZE = 16  # the Llama layout's MLP is 432 wide: a multiple of 16, not of 32


@dataclass(frozen=True)
class GenerationGate:
    max_mae: float | None = None
    max_kl_mean: float | None = None
    min_top1: float | None = None
    identical_generations: bool = True

    def describe(self) -> str:
        """
        >>> GenerationGate(max_mae=1e-5).describe()
        'generations identical & MAE<=1e-05'
        """
        parts = ["generations identical"] if self.identical_generations else []
        parts += [] if self.max_mae is None else [f"MAE<={self.max_mae:g}"]
        parts += [] if self.max_kl_mean is None else [f"KL mean<={self.max_kl_mean:g}"]
        parts += [] if self.min_top1 is None else [f"top1>={self.min_top1:.0%}"]
        return " & ".join(parts)


GATES = {"eager": GenerationGate(max_mae=FLOAT_MAX_MAE), "float": GenerationGate(max_mae=FLOAT_MAX_MAE),
         "int8-weight": GenerationGate(max_kl_mean=INT8_MAX_KL_MEAN, min_top1=INT8_MIN_TOP1, identical_generations=False),
         "int4-weight": GenerationGate(max_kl_mean=INT4_MAX_KL_MEAN, min_top1=INT4_MIN_TOP1, identical_generations=False)}

# The options that set a weight-only family's bounds (flag and settings key): name -> (family, GenerationGate field)
OPTIONS = {"int8-weight-max-kl": ("int8-weight", "max_kl_mean"), "int8-weight-min-top1": ("int8-weight", "min_top1"),
           "int4-weight-max-kl": ("int4-weight", "max_kl_mean"), "int4-weight-min-top1": ("int4-weight", "min_top1")}
OPTION_HELP = {"max_kl_mean": "largest mean KL divergence to eager (nats) of the {family} rows of a language model (default: {default:g})",
               "min_top1": "smallest per-position top-1 agreement with eager of the {family} rows of a language model (default: {default:g})"}
MAE_OPTION = "max-mae"  # the float gate's option bounds the float and eager rows' MAE


def _bound(name: str, value: Any) -> float:
    bound = float(value)
    top1 = name.endswith("top1")
    if not math.isfinite(bound) or bound < 0 or (top1 and bound > 1):
        raise UsageError(f"--{name} must be {'between 0 and 1' if top1 else 'a finite number >= 0'}, got {value!r}; fix the option or settings key")
    return bound


def overlaid(gate: GenerationGate, family: str, values: Mapping[str, Any]) -> GenerationGate:
    """``family``'s ``gate`` with the option values given laid over it (absent or None: kept).

    >>> overlaid(GATES["int8-weight"], "int8-weight", {"int8-weight-max-kl": 2e-4, "max-mae": 1.0}).describe()
    'KL mean<=0.0002 & top1>=95%'
    """
    changes: dict[str, Any] = {f: _bound(n, values[n]) for n, (fam, f) in OPTIONS.items() if fam == family and values.get(n) is not None}
    if family in ("float", "eager") and values.get(MAE_OPTION) is not None:
        changes["max_mae"] = _bound(MAE_OPTION, values[MAE_OPTION])
    return replace(gate, **changes) if changes else gate


def gates_for(values: Mapping[str, Any]) -> dict[str, GenerationGate]:
    """Every family's default gate with the option values of a run laid over it."""
    return {family: overlaid(gate, family, values) for family, gate in GATES.items()}
