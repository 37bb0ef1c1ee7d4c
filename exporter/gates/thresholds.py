"""The run's :class:`Thresholds`: the gate of every family, and the gate values set per output, from the options, the
settings or a report's JSON; and the notes on agreement gates a small golden set cannot judge with any slack.

>>> Thresholds.from_options({"max-mae": 1e-4}).gate_for("eager").describe()
'MAE<=0.0001'
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from .agreement import samples_for_one_flip, tolerated_flips
from .families import FAMILIES, GATE_FAMILIES, GATE_OPTIONS, GateFamily
from .gate import Gate
from .metrics import BOUNDS, STREAMS, top_k_of

if TYPE_CHECKING:
    from ..compare import ErrorAccumulator


@dataclass(frozen=True)
class Thresholds:
    """The gate of every family, in ``GATE_FAMILIES`` order. ``reference_mae`` is the float threshold
    every row is also shown against.

    >>> Thresholds.from_options({"int8-max-mae": 0.2}).gate_for("int8").describe()
    'MAE<=0.2 & relMAE<=5% & top1>=98%'
    """

    gates: tuple[tuple[str, Gate], ...] = tuple((f.name, f.default) for f in GATE_FAMILIES)
    # Per output (settings: gate keys in [tool.export-check.outputs.NAME]): option values keyed by
    # ``GateOption.name``, laid over each family's gate for that output only (``gate_for(family, output)``).
    outputs: tuple[tuple[str, tuple[tuple[str, float], ...]], ...] = ()

    @classmethod
    def from_options(cls, values: dict[str, Any], outputs: dict[str, dict[str, float]] | None = None) -> Thresholds:
        """Gates from option values keyed by ``GateOption.name`` (absent or None: the default), and the
        gate values set per output (``{"boxes": {"max-mae": 1e-4}}``).

        >>> t = Thresholds.from_options({}, {"boxes": {"int8-max-relative-mae": 0.1}})
        >>> t.gate_for("int8", "boxes").describe(), t.gate_for("int8", "scores").describe()
        ('relMAE<=10% & top1>=98%', 'relMAE<=5% & top1>=98%')
        """
        made = cls().overlaid(values)
        return replace(made, outputs=tuple((name, tuple(sorted(v.items()))) for name, v in sorted((outputs or {}).items()) if v))

    @staticmethod
    def _changes(family: GateFamily, values: dict[str, Any]) -> dict[str, Any]:
        source = FAMILIES[family.follows] if family.follows else family
        return {o.field: values[o.name] for o in source.options if values.get(o.name) is not None}

    def overlaid(self, values: dict[str, Any]) -> Thresholds:
        """These gates with the option values keyed by ``GateOption.name`` laid over them (absent or None: kept);
        ``export-check judge`` lays the options given now over a report's gates. A value set for one output
        (settings) stays that output's: it is the more specific."""
        gates = [(family.name, self.gate_for(family.name).replace(**self._changes(family, values))) for family in GATE_FAMILIES]
        return Thresholds(gates=tuple(gates), outputs=self.outputs)

    def output_values(self, output: str) -> dict[str, float]:
        """The gate values set for this one output (settings), keyed by option name; empty when none are."""
        return dict(dict(self.outputs).get(output, ()))

    @classmethod
    def from_json(cls, data: Any, where: str) -> Thresholds:
        """The thresholds a report or bundle recorded (``to_json``); one UsageError line naming ``where`` otherwise."""
        try:
            gates = tuple((f.name, Gate(**{k: v for k, v in data[f.name].items() if k in BOUNDS})) for f in GATE_FAMILIES)
            per_output = data.get("outputs") or {}
            known = {o.name for o in GATE_OPTIONS}
            if not isinstance(per_output, dict) or not all(isinstance(v, dict) and set(v) <= known for v in per_output.values()):
                raise TypeError("its per-output gates are not a table of gate options per output")
            outputs = tuple((str(name), tuple(sorted((k, float(x)) for k, x in v.items()))) for name, v in sorted(per_output.items()) if v)
        except (KeyError, TypeError, ValueError, AttributeError, UsageError) as exc:
            raise UsageError(f"{where}: its gates cannot be read ({exc}); write it again with this export-check") from None
        return cls(gates=gates, outputs=outputs)

    def loosen_keys(self, family: str) -> list[str]:
        """The settings keys of the bounds ``family``'s gate sets: what a failing row's message says to loosen after review."""
        found = FAMILIES.get(family)
        if found is None:
            return ["max-mae"]
        source = FAMILIES[found.follows] if found.follows else found
        bounds = set(self.gate_for(family).set_bounds())
        return [o.name for o in source.options if o.field in bounds] or [k.strip() for k in found.fix_hint.split("/")]

    def with_gates(self, **gates: Gate) -> Thresholds:
        """These thresholds with some families' gates replaced: ``with_gates(float=Gate(max_mae=1e-4))``."""
        unknown = set(gates) - set(FAMILIES)
        if unknown:
            raise UsageError(f"unknown gate family {', '.join(sorted(unknown))}; choose from {', '.join(FAMILIES)}")
        return Thresholds(gates=tuple((name, gates.get(name, gate)) for name, gate in self.gates), outputs=self.outputs)

    @property
    def reference_mae(self) -> float:
        gate = self.gate_for("float")
        return gate.max_mae if gate.max_mae is not None else gate.mae_bound(1.0)

    def gate_for(self, family: str, output: str | None = None) -> Gate:
        """``family``'s gate; for ``output``, with the values set for that output laid over it."""
        gate = dict(self.gates)[family]
        values = self.output_values(output) if output is not None and self.outputs else {}
        return gate.replace(**self._changes(FAMILIES[family], values)) if values else gate

    def all_gates(self) -> tuple[Gate, ...]:
        """Every gate some row or output may be judged by: each family's, and each family's for each output with values of its own."""
        return tuple(dict.fromkeys([g for _, g in self.gates] + [self.gate_for(f, o) for f, _ in self.gates for o, _ in self.outputs]))

    def tolerances(self) -> tuple[tuple[float, float], ...]:
        """Every ``(atol, rtol)`` pair some family's gate tests: what the replay counts per output
        (``compare.ErrorAccumulator``), so each row is judged by the pair of its own family.

        >>> Thresholds.from_options({"atol": 1e-4, "int8-rtol": 0.1}).tolerances()
        ((0.0001, 0.0), (0.0, 0.1))
        """
        pairs = (gate.tolerance for gate in self.all_gates())
        return tuple(dict.fromkeys(p for p in pairs if p is not None))

    def top_ks(self) -> tuple[int, ...]:
        """Every k some family's top-k agreement gate asks for: what the replay counts per logits output."""
        return tuple(dict.fromkeys(k for gate in self.all_gates() if (k := top_k_of(gate)) is not None))

    def accumulator(self, kind: str = "logits", class_axis: int = -1, ctc_blank: int | None = None) -> ErrorAccumulator:
        """What a replay measures of one output (run/observe.py): every allclose pair and k a gate asks for, and every
        stream a gate metric reads (``STREAMS``) that applies to the output, whether a gate bounds it or not."""
        from ..compare import ErrorAccumulator  # numpy: imported when a replay measures, never with the gates

        return ErrorAccumulator(kind, class_axis, self.tolerances(), self.top_ks(), ctc_blank, streams=STREAMS)

    def described(self) -> tuple[tuple[GateFamily, str], ...]:
        """(family, its gate described) for every family, in table order: what the reports show."""
        return tuple((FAMILIES[name], gate.describe()) for name, gate in self.gates)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {name: gate.to_json() for name, gate in sorted(self.gates)}
        data["reference_mae"] = self.reference_mae
        if self.outputs:
            data["outputs"] = {name: dict(values) for name, values in self.outputs}
        return data


def small_set_notes(thresholds: Thresholds, samples: int, per_sample: bool = True) -> list[str]:
    """A line per sample-level agreement gate that ``samples`` golden samples are too few to judge with any slack:
    one changed sample fails it (said at record and under check -v). None when no output is judged by an agreement
    counted in samples (``per_sample`` False: only ``values`` outputs, or sequences judged per position), as no such
    gate is applied then."""
    if not per_sample:
        return []
    notes = []
    for family, gate in thresholds.gates:
        for bound, name in ((gate.min_top1, "top-1"), (gate.min_topk, f"top-{top_k_of(gate)}")):
            if bound and samples and tolerated_flips(bound, samples) == 0:
                need = samples_for_one_flip(bound)
                notes.append(f"{family} gate {name} agreement >= {bound:.1%}: {samples} golden samples are too few to tolerate one changed "
                             f"sample (one flip fails the row; {need} samples would let one pass)")
    return notes
