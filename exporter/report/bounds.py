"""The per-value gates of a row as every view shows them: the allclose count (``atol``/``rtol``) and
where the largest error is. Pure formatters over :class:`~export_check.results.Row`.

>>> from export_check.compare import Tolerance
>>> count_text(Tolerance(atol=1e-4, rtol=0.0, values=640, violations=12))
'12/640'
"""

from __future__ import annotations

from ..compare import Metrics, Tolerance
from ..results import Report, Row


def shown(report: Report) -> bool:
    """Whether any row's gate tests allclose: then the views give it a column."""
    return any(row.gate.tolerance is not None for row in report.rows)


def _metrics(row: Row) -> tuple[Metrics, ...]:
    if row.outputs:
        return tuple(o.metrics for o in row.outputs)
    return () if row.metrics is None else (row.metrics,)


def row_count(row: Row) -> Tolerance | None:
    """The row's allclose count over every compared output (their values and violations added up,
    the worst of their worst), or None when its gate has no atol/rtol or nothing was measured."""
    pair = row.gate.tolerance
    counts = [] if pair is None else [m.tolerance(*pair) for m in _metrics(row)]
    if pair is None or not counts or any(c is None for c in counts):
        return None
    found = [c for c in counts if c is not None]
    worst = max(found, key=lambda c: c.worst_excess if c.worst is not None else -1.0)
    return Tolerance(atol=pair[0], rtol=pair[1], values=sum(c.values for c in found), violations=sum(c.violations for c in found),
                     worst=worst.worst, worst_excess=worst.worst_excess)


def count_text(count: Tolerance | None) -> str:
    """``violations/values``, ``-`` when not gated."""
    return "-" if count is None else f"{count.violations}/{count.values}"


def cell(row: Row) -> str:
    """The allclose column of a row: ``-`` (not gated or not measured), else ``violations/values``."""
    return count_text(row_count(row))


def sentence(count: Tolerance) -> str:
    """
    >>> from export_check.compare import Element
    >>> sentence(Tolerance(atol=1e-4, rtol=0.0, values=640, violations=1, worst=Element(3, 7, 1.0, 1.5), worst_excess=0.4999))
    'allclose(atol=0.0001, rtol=0): 1 of 640 values outside atol + rtol*|reference|, worst sample 3, element 7: 1.5 vs reference 1'
    """
    worst = "" if count.worst is None else f", worst {count.worst.describe()}"
    return (f"allclose(atol={count.atol:g}, rtol={count.rtol:g}): {count.violations} of {count.values} values outside "
            f"atol + rtol*|reference|{worst}")
