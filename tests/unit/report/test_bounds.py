"""report/bounds.py: the allclose column and sentence every view shows, from real counts."""

from __future__ import annotations

import dataclasses

from export_check.compare import compare
from export_check.gates import Gate
from export_check.report.bounds import cell, count_text, row_count, sentence, shown
from export_check.results import FAIL, OutputRow

from .rows import PAIR, REFERENCE, candidate, report, row

GATED = Gate(max_mae=1.0, atol=PAIR[0], rtol=PAIR[1])


def test_a_row_without_atol_or_rtol_has_no_count() -> None:
    plain = row(errors={(0, 0): 0.5})
    assert row_count(plain) is None and cell(plain) == "-" and not shown(report(plain))


def test_the_count_is_the_number_of_values_outside_atol() -> None:
    gated = row(gate=GATED, errors={(0, 0): 0.5, (1, 3): -0.01, (2, 2): 0.0005})
    count = row_count(gated)
    assert count is not None and (count.values, count.violations) == (40, 2) and cell(gated) == "2/40"
    assert count.worst is not None and (count.worst.sample, count.worst.index) == (0, 0)
    assert shown(report(row(), gated))
    text = sentence(count)
    assert text.startswith("allclose(atol=0.001, rtol=0): 2 of 40 values outside atol + rtol*|reference|, worst sample 0, element 0: ")


def test_outputs_are_added_up_and_the_worst_of_them_is_named() -> None:
    small = compare(REFERENCE, candidate({(3, 1): 0.01}), tolerances=(PAIR,))
    large = compare(REFERENCE, candidate({(2, 5): 0.2, (2, 6): 0.003}), tolerances=(PAIR,))
    outputs = (OutputRow("a", FAIL, small, ()), OutputRow("b", FAIL, large, ()))
    count = row_count(row(gate=GATED, outputs=outputs))
    assert count is not None and (count.values, count.violations) == (80, 3)
    assert count.worst == large.tolerance(*PAIR).worst and count.worst.index == 5


def test_an_unmeasured_pair_has_no_count() -> None:
    unmeasured = row(gate=Gate(max_mae=1.0))  # measured without the pair the gate below asks for
    asked = dataclasses.replace(unmeasured, gate=GATED)
    assert row_count(asked) is None and count_text(None) == "-"


def test_a_clean_count_has_no_worst() -> None:
    count = row_count(row(gate=GATED))
    assert count is not None and count.violations == 0 and count.worst is None
    assert sentence(count) == "allclose(atol=0.001, rtol=0): 0 of 40 values outside atol + rtol*|reference|"
