"""Run history: ``--history PATH`` appends one JSON line per run; ``export-check history PATH`` shows the trend.

One line per run, appended under an exclusive lock with a single write, so concurrent runs never
interleave and a killed run leaves at most a last line without its newline (the reader names it).

>>> entry = parse_line('{"format": "export-check-history", "version": 1, "time": "t", "rows": []}', "h", 1)
>>> entry.time
't'
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ExportCheckError

FORMAT = "export-check-history"
VERSION = 1


class HistoryError(ExportCheckError):
    """The history file cannot be read, parsed or appended to."""


@dataclass(frozen=True)
class HistoryRow:
    name: str
    status: str
    mae: float | None
    max_abs: float | None
    top1_agreement: float | None
    latency_ms: float | None
    size_bytes: int | None


@dataclass(frozen=True)
class HistoryRun:
    time: str
    tool_version: str
    checkpoint_sha256: str
    golden_manifest_sha256: str
    passed: bool | None
    rows: tuple[HistoryRow, ...]
    versions: tuple[tuple[str, str], ...]

    def row(self, name: str) -> HistoryRow | None:
        return next((r for r in self.rows if r.name == name), None)


def _finite(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) else None


def summary(report: Any) -> dict[str, Any]:
    """The history record of one report (a pure function of it)."""
    rows = []
    for row in report.rows:
        m = row.metrics
        d = row.diagnostics
        rows.append({
            "name": row.name,
            "status": row.status,
            "mae": None if m is None else _finite(m.mae),
            "max_abs": None if m is None else _finite(m.max_abs),
            "top1_agreement": None if m is None else m.top1_agreement,
            "latency_ms": None if d is None or d.latency is None else d.latency.ms_per_image,
            "size_bytes": None if row.artifact is None else row.artifact.size_bytes,
        })
    return {
        "format": FORMAT,
        "version": VERSION,
        "time": report.created,
        "tool_version": report.tool_version,
        "checkpoint": report.checkpoint.path,
        "checkpoint_sha256": report.checkpoint.sha256,
        "golden_manifest_sha256": report.golden.manifest_sha256,
        "passed": report.passed,
        "thresholds": report.thresholds.to_json(),
        "rows": rows,
        "versions": dict(report.versions),
    }


def append(report: Any, path: Path) -> None:
    """Append the report's summary as one line, under an exclusive lock, fsynced.

    The lock is ``PATH.lock`` beside the history file (filelock's, as for the output directory): a
    lock file is the lock library's to create and rewrite, and the history file is the user's.
    """
    from filelock import FileLock

    line = (json.dumps(summary(report), sort_keys=True, allow_nan=False) + "\n").encode()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(f"{path}.lock"):
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                if os.fstat(fd).st_size and not _ends_with_newline(fd):
                    line = b"\n" + line  # a killed writer left a partial last line: keep ours on a line of its own
                os.write(fd, line)
                os.fsync(fd)
            finally:
                os.close(fd)
    except OSError as exc:
        raise HistoryError(f"{path}: cannot append to the history file ({exc.strerror or exc}); choose a writable --history path") from None


def _ends_with_newline(fd: int) -> bool:
    size = os.fstat(fd).st_size
    return os.pread(fd, 1, size - 1) == b"\n"


def _need(cond: bool, where: str, what: str) -> None:
    if not cond:
        raise HistoryError(f"{where}: {what}; fix or delete that line (each line is one run written by --history)")


def _opt_float(data: dict[str, Any], key: str, where: str) -> float | None:
    value = data.get(key)
    _need(value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)), where, f"{key} must be a number or null")
    return None if value is None else float(value)


def parse_line(text: str, source: str, lineno: int) -> HistoryRun:
    """Parse one history line; every problem names the file and the line."""
    where = f"{source}:{lineno}"
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise HistoryError(
            f"{where}: not valid JSON ({exc.msg}); fix or delete that line (each line is one run written by --history)"
        ) from None
    _need(isinstance(data, dict), where, "a line must be a JSON object")
    _need(data.get("format") == FORMAT, where, f"format is {data.get('format')!r}, expected {FORMAT!r}")
    version = data.get("version")
    _need(version == VERSION, where, f"history version {version!r} is not one this export-check reads ({VERSION})")
    rows_data = data.get("rows")
    _need(isinstance(rows_data, list), where, "'rows' must be a list")
    rows = []
    for i, r in enumerate(rows_data):
        is_row = isinstance(r, dict) and isinstance(r.get("name"), str) and isinstance(r.get("status", ""), str)
        _need(is_row, where, f"rows[{i}] must be an object with a name")
        size = r.get("size_bytes")
        is_size = size is None or (isinstance(size, int) and not isinstance(size, bool))
        _need(is_size, where, f"rows[{i}].size_bytes must be an integer or null")
        rows.append(HistoryRow(
            name=r["name"], status=r.get("status", "?"), mae=_opt_float(r, "mae", where), max_abs=_opt_float(r, "max_abs", where),
            top1_agreement=_opt_float(r, "top1_agreement", where), latency_ms=_opt_float(r, "latency_ms", where), size_bytes=size,
        ))
    strings = {k: data.get(k, "") for k in ("time", "tool_version", "checkpoint_sha256", "golden_manifest_sha256")}
    for key, value in strings.items():
        _need(isinstance(value, str), where, f"{key} must be a string")
    versions = data.get("versions", {})
    _need(isinstance(versions, dict), where, "versions must be an object")
    passed = data.get("passed")
    _need(passed is None or isinstance(passed, bool), where, "passed must be true, false or null")
    return HistoryRun(rows=tuple(rows), passed=passed, versions=tuple(sorted((str(k), str(v)) for k, v in versions.items())), **strings)


def load(path: Path) -> list[HistoryRun]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise HistoryError(f"{path}: history file not found; write one with `export-check CHECKPOINT --history {path}`") from None
    except IsADirectoryError:
        raise HistoryError(f"{path}: is a directory; pass the history file written by --history") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise HistoryError(f"{path}: cannot read the history file ({getattr(exc, 'strerror', None) or exc}); check the path") from None
    return [parse_line(line, str(path), n) for n, line in enumerate(text.splitlines(), 1) if line.strip()]


def _sci(value: float | None) -> str:
    return "-" if value is None else f"{value:.2e}"


def _delta_abs(now: float | None, before: float | None) -> str:
    if now is None or before is None:
        return "-"
    diff = now - before
    return "=" if diff == 0 else f"{diff:+.1e}"


def _delta_pct(now: float | None, before: float | None) -> str:
    if now is None or before is None or before == 0:
        return "-"
    return f"{(now - before) / before:+.0%}"


def render_trend(runs: list[HistoryRun], last: int = 10, artifact: str | None = None) -> str:
    """A table per artifact: MAE and latency of the last ``last`` runs, with the change from the run before."""
    if not runs:
        return "no runs recorded yet"
    shown = runs[-last:] if last > 0 else runs
    offset = len(runs) - len(shown)
    names = list(dict.fromkeys(r.name for run in runs for r in run.rows))
    if artifact is not None:
        if artifact not in names:
            raise HistoryError(f"no artifact {artifact!r} in the history; recorded: {', '.join(names)}")
        names = [artifact]
    out = [f"{len(runs)} runs recorded; showing the last {len(shown)}"]
    header = ("run", "time", "checkpoint", "golden", "verdict", "MAE", "ΔMAE", "ms/img", "Δms/img", "size")
    for name in names:
        lines = []
        for k, run in enumerate(shown):
            row = run.row(name)
            index = offset + k
            previous = next((runs[j].row(name) for j in range(index - 1, -1, -1) if runs[j].row(name) is not None), None)
            if row is None:
                continue
            lines.append((
                str(index + 1), run.time, run.checkpoint_sha256[:12], run.golden_manifest_sha256[:12], row.status,
                _sci(row.mae), _delta_abs(row.mae, previous.mae if previous else None),
                "-" if row.latency_ms is None else f"{row.latency_ms:.3g}",
                _delta_pct(row.latency_ms, previous.latency_ms if previous else None),
                "-" if row.size_bytes is None else str(row.size_bytes),
            ))
        widths = [max(len(r[i]) for r in (header, *lines)) for i in range(len(header))]
        fmt = "  ".join(f"{{:<{w}}}" for w in widths)
        out += ["", name, fmt.format(*header), fmt.format(*("-" * w for w in widths)), *(fmt.format(*line) for line in lines)]
    return "\n".join(line.rstrip() for line in out)


def render_json(runs: list[HistoryRun], last: int = 10) -> str:
    shown = runs[-last:] if last > 0 else runs
    return json.dumps([{"time": r.time, "checkpoint_sha256": r.checkpoint_sha256, "golden_manifest_sha256": r.golden_manifest_sha256,
                        "passed": r.passed, "rows": [vars(row) for row in r.rows]} for r in shown], indent=2) + "\n"
