"""The typed :class:`Gate`: what one row must meet, a bound on each metric of ``metrics.GATE_METRICS`` it sets.

>>> Gate(max_mae=1e-5, min_cosine=0.999).describe()
'MAE<=1e-05 & cos>=0.999'
>>> Gate(max_relative_mae=0.05).min_top1, Gate(max_relative_mae=0.05).max_abs
(0.0, None)
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from ..errors import UsageError
from .metrics import BOUNDS, GATE_METRICS, Bound, GateMetric


def _check_bound(bound: Bound, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise UsageError(f"{bound.title} must be a finite number >= 0, got {value!r}")
    if bound.fraction and value > 1:
        raise UsageError(f"{bound.title} is a fraction in [0, 1], got {value!r}")
    if bound.count and (value < 1 or value != int(value)):
        raise UsageError(f"{bound.title} is a whole number >= 1, got {value!r}")
    return float(value) if not isinstance(value, int) else value


class Gate:
    """What one row must meet: a bound on each metric of ``GATE_METRICS`` it sets, by keyword
    (``max_mae``, ``max_relative_mae``, ``min_top1``, ``max_abs``, ``atol``/``rtol``, ``min_cosine``,
    ``min_snr_db``). Every gate bounds the MAE, absolutely and/or relative to the output's mean
    absolute reference value (scale-free: the gate of the non-float families). Unset bounds do not
    gate; non-finite outputs always fail. Frozen, compared and hashed by its bounds.

    >>> Gate(max_relative_mae=0.05, min_top1=0.98).describe()
    'relMAE<=5% & top1>=98%'
    >>> Gate(max_mae=1e-5, atol=1e-4, rtol=1e-3).describe()
    'MAE<=1e-05 & atol=0.0001 rtol=0.001'
    >>> Gate(max_mae=1e-5).replace(max_mae=None)
    Traceback (most recent call last):
    export_check.errors.UsageError: a gate needs a max MAE or a max relative MAE
    """

    __slots__ = ("_bounds",)
    _bounds: dict[str, float]

    def __init__(self, **bounds: float | None) -> None:
        unknown = sorted(set(bounds) - set(BOUNDS))
        if unknown:
            raise TypeError(f"Gate() got unknown bounds {', '.join(unknown)}; the bounds are {', '.join(BOUNDS)}")
        kept = {name: _check_bound(BOUNDS[name], value) for name, value in bounds.items() if value is not None}
        if "max_mae" not in kept and "max_relative_mae" not in kept:
            raise UsageError("a gate needs a max MAE or a max relative MAE")
        object.__setattr__(self, "_bounds", {name: kept[name] for name in BOUNDS if name in kept})

    def __getattr__(self, name: str) -> Any:
        bound = BOUNDS.get(name)
        if bound is None or name.startswith("_"):
            raise AttributeError(f"'Gate' object has no attribute {name!r}")
        return self._bounds.get(name, bound.unset)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("a Gate is frozen: use gate.replace(...)")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Gate) and self._set() == other._set()

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._set().items())))

    def __repr__(self) -> str:
        return f"Gate({', '.join(f'{k}={v!r}' for k, v in self._bounds.items())})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_gate, (tuple(self._bounds.items()),))

    def _set(self) -> dict[str, float]:
        """The bounds that gate (a bound at its unset value, min_top1=0, is no bound)."""
        return {k: v for k, v in self._bounds.items() if v != BOUNDS[k].unset}

    def set_bounds(self) -> tuple[str, ...]:
        """The keywords of the bounds that gate, in table order."""
        return tuple(self._set())

    def replace(self, **changes: float | None) -> Gate:
        """This gate with some bounds changed (None: unset)."""
        return Gate(**{**self._bounds, **changes})

    def only(self, metrics: Iterable[GateMetric]) -> Gate:
        """This gate without the bounds of the metrics not given (the MAE bounds are always kept)."""
        keep = {b.field for m in metrics for b in m.bounds} | {"max_mae", "max_relative_mae"}
        return Gate(**{k: v for k, v in self._bounds.items() if k in keep})

    @property
    def tolerance(self) -> tuple[float, float] | None:
        """``(atol, rtol)`` of the elementwise allclose test, or None when neither is set."""
        atol, rtol = self._bounds.get("atol"), self._bounds.get("rtol")
        if atol is None and rtol is None:
            return None
        return (atol or 0.0, rtol or 0.0)

    def mae_bound(self, reference_mean_abs: float) -> float:
        """The absolute MAE this gate allows an output whose mean absolute reference value is given."""
        relative = self._bounds.get("max_relative_mae")
        bounds = [b for b in (self._bounds.get("max_mae"), None if relative is None else relative * reference_mean_abs) if b is not None]
        return min(bounds)

    def describe(self) -> str:
        return " & ".join(shown for m in GATE_METRICS if (shown := m.shown(self)) is not None)

    def to_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in BOUNDS}


def _gate(bounds: tuple[tuple[str, float], ...]) -> Gate:
    return Gate(**dict(bounds))


