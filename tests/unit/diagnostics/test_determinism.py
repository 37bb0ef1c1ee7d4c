"""diagnostics/determinism.py: two runs of one batch compared; NaN in the same place is the same, a shape change infinite."""

from __future__ import annotations

import math

import numpy as np

from export_check.diagnostics.determinism import max_abs_difference


def test_max_abs_difference() -> None:
    a = np.array([[1.0, np.nan, 3.0], [2.0, 0.0, -1.0]], np.float32)
    assert max_abs_difference(a, a.copy()) == 0.0
    b = a.copy()
    b[1, 2] = -1.25
    assert max_abs_difference(a, b) == 0.25
    b[0, 0] = np.nan
    assert max_abs_difference(a, b) == math.inf  # a NaN where the first run had a number
    assert max_abs_difference(a, a[:1]) == math.inf
    assert max_abs_difference(np.zeros((0, 3)), np.zeros((0, 3))) == 0.0


def test_an_infinity_in_the_same_place_is_the_same() -> None:
    a = np.array([np.inf, -np.inf, 1.0])
    assert max_abs_difference(a, a.copy()) == 0.0
    assert max_abs_difference(a, np.array([-np.inf, -np.inf, 1.0])) == math.inf
