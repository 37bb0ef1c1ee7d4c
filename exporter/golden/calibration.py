"""The calibration split of a golden set: which samples the statically quantized kinds calibrate
on (they are judged on the others), by rule: the inputs of smallest content sha256, the first ones,
or the inputs named. A manifest records it in ``recording.calibration`` (validated by
:func:`export_check.golden.manifest.calibration_from_json`); one that records none gets
:func:`default_calibration`, half the set and at most :data:`CALIBRATION_MAX` samples.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol


class Sample(Protocol):
    """What the split reads of a golden input (``goldenset.GoldenInput``): its name and content hash."""

    @property
    def name(self) -> str: ...

    @property
    def sha256(self) -> str: ...

CALIBRATION_RULES = ("sha256", "first", "names")
CALIBRATION_MAX = 32  # the default split's cap: what onnxruntime and PT2E calibrate well on (measured on the digits)


@dataclass(frozen=True)
class CalibrationSplit:
    """The golden samples the statically quantized kinds calibrate on; they are judged on the others.

    ``rule``: ``"sha256"`` the ``count`` inputs of smallest content sha256 (stable: it follows the
    content, not file names or their order, so it spreads over classes however files are named);
    ``"first"`` the first ``count`` in the manifest's order; ``"names"`` the inputs named.
    ``recorded``: False when the manifest says nothing (written before the split existed): then the
    default, :func:`default_calibration`, applies.

    >>> default_calibration(64).describe()
    'the 32 inputs of smallest sha256 (recorded in the manifest)'
    """

    rule: str
    count: int
    names: tuple[str, ...] = ()
    recorded: bool = True

    def to_json(self) -> dict[str, Any]:
        if self.rule == "names":
            return {"rule": "names", "names": list(self.names)}
        return {"rule": self.rule, "count": self.count}

    def indices(self, inputs: Sequence[Sample]) -> tuple[int, ...]:
        """The calibration samples' positions in ``inputs``, ascending."""
        if self.rule == "names":
            wanted = set(self.names)
            return tuple(i for i, item in enumerate(inputs) if item.name in wanted)
        if self.rule == "first":
            return tuple(range(min(self.count, len(inputs))))
        ranked = sorted(range(len(inputs)), key=lambda i: (inputs[i].sha256, i))
        return tuple(sorted(ranked[: self.count]))

    def describe(self) -> str:
        if self.rule == "names":
            what = f"the {len(self.names)} inputs named in the manifest"
        elif self.rule == "first":
            what = f"the first {self.count} inputs"
        else:
            what = f"the {self.count} inputs of smallest sha256"
        return what + (" (recorded in the manifest)" if self.recorded else " (the default: the manifest records no split)")


def default_calibration(samples: int) -> CalibrationSplit:
    """Half the set, at most 32 samples, by content sha256: 32 of 64 golden digits, 0 of 1 (too few)."""
    return CalibrationSplit("sha256", min(CALIBRATION_MAX, samples // 2))
