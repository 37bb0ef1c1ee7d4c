"""``export-check judge REPORT.json``: a stored report judged again with other gates, nothing re-run.

A check's JSON report holds, beside its judged rows, every row's observation (``observations``: the
same records the artifact cache keeps, ``measurements.Observation``). Judging them again is the
judge's one pure step (``judge.judge_rows``) with the report's gates overlaid by the ones given now;
the report that comes out is a :class:`results.Report` like a check's, so every view and the exit codes
are the same as those of a fresh check with those gates. Nothing here imports torch or a runtime
(``tests/integration/test_rejudge.py`` judges with torch made unimportable).

What a gate asks for and the report never measured (an allclose pair, a top-k, a per-layer table) is
not invented: the row fails with "... was not measured" and the run's note says which gates need a new
check. A language model's report holds its verdicts in its rows (``decode_judge``, ``token_verdict``):
those are judged again by the decode judge (``decode.rows.judged_again``). A fleet's report (several
models) is judged model by model. The report is read as ``merge``
reads one: bounded, its seal checked before its JSON is parsed.
"""

from __future__ import annotations

import functools
import time
from dataclasses import fields, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from . import __version__
from .cache.sealed import from_plain
from .errors import UsageError
from .files import FileInfo
from .gates import Thresholds, missing_names
from .records import Observation
from .results import GoldenSummary, Report
from .run.judge import judge_rows, layers_missing, reduction_missing

FIX = "write it again with `export-check check --json PATH` (reports written before `export-check judge` existed hold no observations)"


def _observations(data: dict[str, Any], where: str) -> list[Observation]:
    stored = data.get("observations")
    if not isinstance(stored, list) or not stored:
        raise UsageError(f"{where}: holds no observations to judge again; {FIX}")
    try:
        return [from_plain(Observation, o) for o in stored]
    except (TypeError, ValueError, KeyError) as exc:
        raise UsageError(f"{where}: its observations cannot be read ({str(exc)[:200]}); {FIX}") from None


def lacking(obs: Observation, thresholds: Thresholds) -> tuple[str, ...]:
    """What ``obs`` lacks for ``thresholds``: the gated values it never measured, else the per-layer table a failing row gets."""
    pairs = ((None, obs.metrics), *obs.outputs)
    names = {n for name, m in pairs if m is not None for n in missing_names(m, thresholds.gate_for(obs.family, name))}
    if names:
        return tuple(sorted(names))
    return ("the reduced subgraph of a failing ONNX row",) if reduction_missing(obs, thresholds) else ("the per-layer table of a failing row",)


def _golden(data: dict[str, Any]) -> GoldenSummary:
    return GoldenSummary(path=str(data["path"]), inputs=int(data["inputs"]), manifest_sha256=str(data["manifest_sha256"]),
                         created=str(data["created"]), recorded_checkpoint_sha256=data.get("recorded_checkpoint_sha256"),
                         recorded_with=tuple(sorted(dict(data.get("recorded_with") or {}).items())),
                         label_accuracy=data.get("eager_label_accuracy"))


def judge_data(data: dict[str, Any], where: str, values: dict[str, Any], strict: bool | None = None) -> Report:
    """One model's report (its JSON, as read) judged with the gate options ``values`` laid over its own gates."""
    started = time.perf_counter()
    from .decode.rows import is_decode_report, judged_again

    decode = is_decode_report(data)  # a language model's verdicts are stored in its rows (exporter/decode/rows.py)
    observations = [] if decode else _observations(data, where)
    try:
        recorded = Thresholds.from_json(data["thresholds"], where)
        settings = dict(data.get("settings") or {})
        diagnose = bool(settings.get("diagnose", False))
        strict = bool(settings.get("strict", False)) if strict is None else strict
        thresholds = recorded.overlaid(values)
        checkpoint = FileInfo(**{f.name: data["checkpoint"][f.name] for f in fields(FileInfo) if f.name != "parts"})
        golden = _golden(data["golden"])
        notes = [str(n) for n in data.get("run_notes") or ()]
        tool_version, out_dir, target = str(data["tool_version"]), str(data["out_dir"]), data.get("target")
        versions = tuple(sorted(dict(data.get("versions") or {}).items()))
        settings_files = tuple(str(s) for s in data.get("settings_files") or ())
        node_data = tuple((str(k), str(v)) for k, v in dict(data.get("node_data") or {}).items())
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise UsageError(f"{where}: a damaged export-check report (field {exc} missing or wrong); {FIX}") from None
    changed = [f"{name} {gate.describe()}" for (name, gate), (_, before) in zip(thresholds.gates, recorded.gates, strict=True)
               if gate != before]
    notes.append(f"judged again from {where} (created {data.get('created')}) without re-running anything"
                 + (f"; gates changed: {'; '.join(changed)}" if changed else "; with its own gates"))
    wanting = [f"{o.name} ({', '.join(lacking(o, thresholds))})" for o in observations if layers_missing(o, thresholds, diagnose)]
    if wanting:
        notes.append(f"judge: the report lacks what these gates ask for: {'; '.join(wanting)}; a check with these gates measures it "
                     "(export-check check ... with the same gate options)")
    if decode:
        rows, decode_notes = judged_again(data, where, values, strict)
        notes += decode_notes
    else:
        rows = tuple(judge_rows(observations, thresholds, diagnose, strict))
    return Report(created=datetime.now(UTC).isoformat(timespec="seconds"), thresholds=thresholds, rows=tuple(rows),
                  seconds=time.perf_counter() - started, timings=(("judge", round(time.perf_counter() - started, 4)),),
                  run_notes=tuple(notes), observations=tuple(observations), tool_version=tool_version, checkpoint=checkpoint,
                  golden=golden, settings=tuple(sorted({**settings, "strict": strict}.items())), versions=versions, out_dir=out_dir,
                  settings_files=settings_files, target=None if target is None else str(target), node_data=node_data)


def read_report(path: Path) -> dict[str, Any]:
    """A JSON report as ``merge`` reads one: bounded, sealed, parsed; a model's or a fleet's."""
    from .fleet.merge import read_report as read
    from .report.seal import reader_key

    return read(path, functools.cache(reader_key))


def judge_report(path: Path, values: dict[str, Any], strict: bool | None = None) -> Any:
    """The report at ``path`` judged again: a :class:`Report`, or for a fleet's report a fleet report of
    every model judged again (a model that had no report stays the error it was)."""
    from .fleet.merge import FLEET_SCHEMA

    data = read_report(path)
    if data["schema"] != FLEET_SCHEMA:
        return judge_data(data, str(path), values, strict)
    from .fleet.result import FleetReport, ModelResult
    from .report.json_report import as_data

    try:
        models = [ModelResult.from_json(m) for m in data["models"]]
        fleet = FleetReport(models=(), seconds=0.0, executor=f"judged again from {path}", created=datetime.now(UTC).isoformat(timespec="seconds"),
                            tool_version=__version__, fleet_file=data.get("fleet_file"), fleet_sha256=data.get("fleet_sha256"),
                            fleet_models=tuple(str(m) for m in data.get("fleet_models") or ()), shard=data.get("shard"))
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"{path}: a damaged export-check fleet report (field {exc} missing or wrong); {FIX}") from None
    started = time.perf_counter()
    judged = [model if model.report is None else replace(model, report=as_data(judge_data(model.report, f"{path} [{model.name}]", values, strict)))
              for model in models]
    return replace(fleet, models=tuple(judged), seconds=time.perf_counter() - started)
