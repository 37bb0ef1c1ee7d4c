"""``--json PATH``: the whole report as JSON. Its schema is ``report.schema.json`` beside this module
(shipped with the package, :func:`schema`); the report's ``schema_version`` names the version it follows."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ..results import SCHEMA_VERSION, Report
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


SCHEMA_FILE = "report.schema.json"


def schema() -> dict[str, Any]:
    """The JSON schema (draft 2020-12) of the report, version ``SCHEMA_VERSION``."""
    from importlib.resources import files

    data: dict[str, Any] = json.loads(files(__package__).joinpath(SCHEMA_FILE).read_text(encoding="utf-8"))
    assert data["properties"]["schema_version"]["const"] == SCHEMA_VERSION, "report.schema.json is not the schema of this version"
    return data


def render(report: Report) -> str:
    return json.dumps(_finite(report.to_json()), indent=2, allow_nan=False) + "\n"


def as_data(report: Report) -> dict[str, Any]:
    """The report as the data ``--json`` writes (non-finite numbers as null): a fleet's model and the pytest session
    report hold it, so what ``merge`` reads back equals what a run held."""
    data: dict[str, Any] = json.loads(render(report))  # parsed back: lists, string keys, exactly what a reader of the file gets
    return data


def write(report: Report, path: Path) -> None:
    write_text_atomic(path, render(report), inside=report.out_dir)
