"""``--json PATH``: the whole report as JSON (schema documented in the README)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ..results import Report
from . import write_text_atomic


def _finite(value: Any) -> Any:
    # JSON has no Inf/NaN; an infinite error (from non-finite outputs) is written as null.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def render(report: Report) -> str:
    return json.dumps(_finite(report.to_json()), indent=2, allow_nan=False) + "\n"


def write(report: Report, path: Path) -> None:
    write_text_atomic(path, render(report))
