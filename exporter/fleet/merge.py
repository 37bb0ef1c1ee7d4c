"""``export-check merge REPORT.json ...``: the JSON reports of several runs (CI shards, say) as one
fleet report, with the verdicts each run gave. Reads the two kinds of JSON report the tool writes: a
fleet's (``schema: export-check-fleet-report``) and one model's (``schema: export-check-report``), each
sealed with the cache key (exporter/report/seal.py; checked before the JSON is parsed); anything
else, and a report edited since, is refused with one line. A model in two reports is refused (merge each shard once);
a model of the fleet that no report holds becomes an error row (a shard that did not run never
passes silently).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .. import __version__
from ..cache.secret import CacheKey
from ..errors import UsageError
from ..report.seal import reader_key, verified
from .binding import check_targets
from .result import MISSING, FleetReport, ModelResult

FLEET_SCHEMA, MODEL_SCHEMA = "export-check-fleet-report", "export-check-report"


def read_report(path: Path, key: Callable[[], CacheKey], public: Any = None) -> dict[str, Any]:
    """A JSON report of export-check (a model's or a fleet's), its seal checked on the bytes, then parsed within bounds."""
    from ..parsing import REPORT_MAX_BYTES, load_json, read_text

    fix = "pass the JSON files written by export-check --json"
    # bounded: a regular file (a FIFO refused), its size, UTF-8; then the seal, checked on the bytes before any
    # JSON is parsed; then the JSON within the bounds (nesting, numbers)
    text = read_text(path, REPORT_MAX_BYTES, "report", fix)
    data = load_json(verified(path, text.encode("utf-8"), key, public=public).decode("utf-8"), path, fix)  # public: --verify-key
    schema = data.get("schema") if isinstance(data, dict) else None
    if schema not in (FLEET_SCHEMA, MODEL_SCHEMA):
        raise UsageError(f"{path}: not a JSON report of export-check (no schema {FLEET_SCHEMA!r} or {MODEL_SCHEMA!r}); "
                         "pass the files written by --json")
    return data


def _models(path: Path, data: dict[str, Any]) -> list[ModelResult]:
    try:
        if data["schema"] == MODEL_SCHEMA:
            checkpoint = data["checkpoint"]["path"]
            data["passed"], data["exit_code"], data["counts"]  # noqa: B018 - the fields the views read
            # a replay's report (export-check replay) is the same model judged on another machine: named after it
            name = checkpoint if not data.get("target") else f"{checkpoint} @ {data['target']}"
            return [ModelResult(name=name, checkpoint=checkpoint, report=data, seconds=float(data["seconds"]))]
        return [ModelResult.from_json(m) for m in data["models"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"{path}: a damaged export-check report (field {exc} missing or wrong); write it again with --json") from None


def merge(paths: Sequence[Path], public: Any = None) -> FleetReport:
    if not paths:
        raise UsageError("merge: name the JSON reports to merge")
    by_name: dict[str, tuple[ModelResult, Path]] = {}
    fleets: dict[str, tuple[str, ...]] = {}  # fleet sha256 -> its model names
    files: list[str] = []
    key = functools.cache(reader_key)  # read once, and only when a sealed report needs it
    for path in paths:
        data = read_report(path, key, public)
        if data["schema"] == FLEET_SCHEMA and data.get("fleet_sha256"):
            fleets[data["fleet_sha256"]] = tuple(data.get("fleet_models") or ())
            files.append(str(data.get("fleet_file") or "checkpoints on the command line"))
        for model in _models(path, data):
            if model.name in by_name:
                raise UsageError(f"{path}: model {model.name!r} is also in {by_name[model.name][1]}; merge each run's report once")
            by_name[model.name] = (model, path)
    if len(fleets) > 1:
        raise UsageError(f"{', '.join(map(str, paths))}: reports of {len(fleets)} different fleet files ({', '.join(sorted(set(files)))}); "
                         "merge the shards of one fleet")
    check_targets(by_name.values())  # a target's replay of another bundle than its build's is refused, never a row
    everything = next(iter(fleets.values()), ())
    models = [by_name[name][0] for name in everything if name in by_name]
    models += [m for name, (m, _) in by_name.items() if name not in everything]
    models += [ModelResult(name=name, checkpoint="", report=None, error_kind=MISSING,
                           error="in the fleet, but in none of the merged reports (a shard that did not run?)")
               for name in everything if name not in by_name]
    return FleetReport(
        models=tuple(models), seconds=sum(m.seconds for m in models), executor=f"merge of {len(paths)} reports",
        created=datetime.now(UTC).isoformat(timespec="seconds"), tool_version=__version__,
        fleet_file=next((f for f in files if not f.startswith("checkpoints on")), None), fleet_sha256=next(iter(fleets), None),
        fleet_models=everything,
    )
