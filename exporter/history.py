"""Run history: ``--history PATH`` appends one JSON line per run; ``export-check history PATH`` shows the trend.

One line per run, appended under an exclusive lock with a single write, so concurrent runs never
interleave and a killed run leaves at most a last line without its newline (the reader names it).

Each line says where the run came from: the commit (the CI's variable, else ``git rev-parse HEAD`` in
the working directory) and the CI run (its id and, on GitHub Actions, its URL); each row says whether
its numbers were served from the cache (``cached: true``): those are an earlier run's measurement,
not a new one, so the trend compares every row with the last run that really measured it, and the
HTML plot (``export-check history --html``) draws cached values hollow.

>>> entry = parse_line('{"format": "export-check-history", "version": 1, "time": "t", "rows": []}', "h", 1)
>>> entry.time
't'
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import stat
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ExportCheckError, one_line
from .parsing import HISTORY_MAX_BYTES, load_json, read_text

FORMAT = "export-check-history"
VERSION = 1  # commit, ci_run, ci_url and each row's cached were added within version 1: older lines lack them

# The commit a CI job checked out, by CI system, before asking git (a container may have no git, or a
# checkout git refuses as another user's): GitHub Actions, GitLab, Jenkins, TeamCity, Azure
# Pipelines, CircleCI, Bitbucket, Buildkite, Travis.
COMMIT_VARIABLES = ("GITHUB_SHA", "CI_COMMIT_SHA", "GIT_COMMIT", "BUILD_VCS_NUMBER", "BUILD_SOURCEVERSION", "CIRCLE_SHA1",
                    "BITBUCKET_COMMIT", "BUILDKITE_COMMIT", "TRAVIS_COMMIT")
# The CI run's id, in the same order (Jenkins: BUILD_ID; TeamCity: BUILD_NUMBER is per configuration, so BUILD_ID too).
RUN_VARIABLES = ("GITHUB_RUN_ID", "CI_PIPELINE_ID", "BUILD_ID", "BUILD_BUILDID", "CIRCLE_WORKFLOW_ID", "BITBUCKET_BUILD_NUMBER",
                 "BUILDKITE_BUILD_ID", "TRAVIS_BUILD_ID")
_COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_MAX_FIELD = 200
_MAX_NUMBER = (1 << 63) - 1  # a history value beyond this is damage, not a measurement


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
    cached: bool = False  # served from the cache: an earlier run's measurement, not a new one


@dataclass(frozen=True)
class HistoryRun:
    time: str
    tool_version: str
    checkpoint_sha256: str
    golden_manifest_sha256: str
    passed: bool | None
    rows: tuple[HistoryRow, ...]
    versions: tuple[tuple[str, str], ...]
    commit: str | None = None
    ci_run: str | None = None
    ci_url: str | None = None

    def row(self, name: str) -> HistoryRow | None:
        return next((r for r in self.rows if r.name == name), None)


@dataclass(frozen=True)
class Provenance:
    """Where a run came from: the commit and the CI run (``None`` where unknown)."""

    commit: str | None = None
    ci_run: str | None = None
    ci_url: str | None = None


def _variable(env: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    for name in names:
        value = env.get(name, "").strip()
        if value:
            return one_line(value)[:_MAX_FIELD]
    return None


def git_commit(cwd: Path | None = None) -> str | None:
    """``git rev-parse HEAD`` in ``cwd`` (the working directory), or ``None`` without git or a repository."""
    try:
        result = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10, check=False,
                                stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    commit = result.stdout.strip()
    return commit if result.returncode == 0 and _COMMIT.fullmatch(commit) else None


def provenance(env: Mapping[str, str] | None = None, cwd: Path | None = None) -> Provenance:
    """The commit (the CI's variable, else git in ``cwd``) and the CI run of this process.

    >>> provenance({"GITHUB_SHA": "a" * 40, "GITHUB_RUN_ID": "42", "GITHUB_SERVER_URL": "https://github.com",
    ...             "GITHUB_REPOSITORY": "o/r"}).ci_url
    'https://github.com/o/r/actions/runs/42'
    """
    env = os.environ if env is None else env
    commit = _variable(env, COMMIT_VARIABLES) or git_commit(cwd)
    run = _variable(env, RUN_VARIABLES)
    url = None
    if run is not None and env.get("GITHUB_RUN_ID", "").strip() and env.get("GITHUB_REPOSITORY", "").strip():
        server = env.get("GITHUB_SERVER_URL", "").strip() or "https://github.com"
        url = one_line(f"{server}/{env['GITHUB_REPOSITORY'].strip()}/actions/runs/{run}")[:_MAX_FIELD]
    elif run is not None:
        url = _variable(env, ("CI_PIPELINE_URL", "BUILD_URL", "CIRCLE_BUILD_URL", "BUILDKITE_BUILD_URL"))
    return Provenance(commit=commit, ci_run=run, ci_url=url)


def _finite(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) else None


def summary(report: Any, origin: Provenance | None = None) -> dict[str, Any]:
    """The history record of one report and where it came from (a pure function of them)."""
    origin = origin or Provenance()
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
            "cached": row.cache == "hit",  # nothing was built or replayed: the numbers are the stored entry's
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
        "commit": origin.commit,
        "ci_run": origin.ci_run,
        "ci_url": origin.ci_url,
    }


def append(report: Any, path: Path, origin: Provenance | None = None) -> None:
    """Append the report's summary as one line, under an exclusive lock, fsynced; ``origin``: this
    process's commit and CI run (:func:`provenance`) unless given.

    The lock is ``PATH.lock`` beside the history file (filelock's, as for the output directory): a
    lock file is the lock library's to create and rewrite, and the history file is the user's.
    """
    from filelock import FileLock

    from .nofollow import Refused

    line = (json.dumps(summary(report, origin or provenance()), sort_keys=True, allow_nan=False) + "\n").encode()
    try:
        # opened before the lock is taken: a link planted in --out is refused before anything is made beside it
        with _opened(path, getattr(report, "out_dir", None)) as fd, FileLock(f"{path}.lock"):
            if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO or a device: the line would go nowhere, or block
                raise HistoryError(f"{path}: is not a regular file; choose a --history path of a file")
            if os.fstat(fd).st_size and not _ends_with_newline(fd):
                line = b"\n" + line  # a killed writer left a partial last line: keep ours on a line of its own
            os.write(fd, line)
            os.fsync(fd)
    except Refused as exc:
        raise HistoryError(str(exc)) from None
    except OSError as exc:
        raise HistoryError(f"{path}: cannot append to the history file ({exc.strerror or exc}); choose a writable --history path") from None


@contextlib.contextmanager
def _opened(path: Path, out_dir: str | None) -> Iterator[int]:
    """An ``O_APPEND`` descriptor on the history file: inside the run's ``--out``, reached without following
    a link there (``nofollow.appending``: a planted one is refused); elsewhere the user's path, as given."""
    from .nofollow import appending, within

    found = within(path, out_dir)
    if found is not None:
        with appending(*found) as fd:
            yield fd
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK, 0o644)
    try:
        yield fd
    finally:
        os.close(fd)


def _ends_with_newline(fd: int) -> bool:
    size = os.fstat(fd).st_size
    return os.pread(fd, 1, size - 1) == b"\n"


def _need(cond: bool, where: str, what: str) -> None:
    if not cond:
        raise HistoryError(f"{where}: {what}; fix or delete that line (each line is one run written by --history)")


def _opt_float(data: dict[str, Any], key: str, where: str) -> float | None:
    value = data.get(key)
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    _need(value is None or (is_number and math.isfinite(value) and abs(value) <= _MAX_NUMBER), where,
          f"{key} must be a finite number or null")
    return None if value is None else float(value)


def parse_line(text: str, source: str, lineno: int) -> HistoryRun:
    """Parse one history line; every problem names the file and the line."""
    where = f"{source}:{lineno}"
    # bounded: nesting, integer digits, finite numbers (a damaged line is one error naming it, never a traceback)
    data = load_json(text, where, "fix or delete that line (each line is one run written by --history)", HistoryError)
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
        is_size = size is None or (isinstance(size, int) and not isinstance(size, bool) and 0 <= size <= _MAX_NUMBER)
        _need(is_size, where, f"rows[{i}].size_bytes must be an integer from 0 to 2^63 or null")
        cached = r.get("cached", False)
        _need(isinstance(cached, bool), where, f"rows[{i}].cached must be true or false")
        rows.append(HistoryRow(
            name=r["name"], status=r.get("status", "?"), mae=_opt_float(r, "mae", where), max_abs=_opt_float(r, "max_abs", where),
            top1_agreement=_opt_float(r, "top1_agreement", where), latency_ms=_opt_float(r, "latency_ms", where), size_bytes=size,
            cached=cached,
        ))
    strings = {k: data.get(k, "") for k in ("time", "tool_version", "checkpoint_sha256", "golden_manifest_sha256")}
    for key, value in strings.items():
        _need(isinstance(value, str), where, f"{key} must be a string")
    versions = data.get("versions", {})
    _need(isinstance(versions, dict), where, "versions must be an object")
    passed = data.get("passed")
    _need(passed is None or isinstance(passed, bool), where, "passed must be true, false or null")
    origin = {k: data.get(k) for k in ("commit", "ci_run", "ci_url")}
    for key, value in origin.items():
        _need(value is None or isinstance(value, str), where, f"{key} must be a string or null")
    return HistoryRun(rows=tuple(rows), passed=passed, versions=tuple(sorted((str(k), str(v)) for k, v in versions.items())),
                      **strings, **origin)


def load(path: Path) -> list[HistoryRun]:
    if not path.exists():
        raise HistoryError(f"{path}: history file not found; write one with `export-check CHECKPOINT --history {path}`")
    # a regular file (a FIFO or device refused, never waited on), at most HISTORY_MAX_BYTES, UTF-8
    text = read_text(path, HISTORY_MAX_BYTES, "history file", "pass the history file written by --history", HistoryError)
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
    header = ("run", "time", "commit", "checkpoint", "golden", "verdict", "MAE", "ΔMAE", "ms/img", "Δms/img", "size")
    for name in names:
        lines = []
        for k, run in enumerate(shown):
            row = run.row(name)
            index = offset + k
            if row is None:
                continue
            previous = last_measured(runs, index, name)
            cached = " (cached)" if row.cached else ""  # an earlier run's numbers: no change to show
            lines.append((
                str(index + 1), run.time, (run.commit or "-")[:12], run.checkpoint_sha256[:12], run.golden_manifest_sha256[:12],
                row.status + cached, _sci(row.mae), "cached" if row.cached else _delta_abs(row.mae, previous.mae if previous else None),
                "-" if row.latency_ms is None else f"{row.latency_ms:.3g}",
                "cached" if row.cached else _delta_pct(row.latency_ms, previous.latency_ms if previous else None),
                "-" if row.size_bytes is None else str(row.size_bytes),
            ))
        widths = [max(len(r[i]) for r in (header, *lines)) for i in range(len(header))]
        fmt = "  ".join(f"{{:<{w}}}" for w in widths)
        out += ["", name, fmt.format(*header), fmt.format(*("-" * w for w in widths)), *(fmt.format(*line) for line in lines)]
    return "\n".join(line.rstrip() for line in out)


def last_measured(runs: list[HistoryRun], index: int, name: str) -> HistoryRow | None:
    """The row ``name`` of the last run before ``index`` that measured it (not served from the cache)."""
    for j in range(index - 1, -1, -1):
        row = runs[j].row(name)
        if row is not None and not row.cached:
            return row
    return None


def render_json(runs: list[HistoryRun], last: int = 10) -> str:
    shown = runs[-last:] if last > 0 else runs
    return json.dumps([{"time": r.time, "commit": r.commit, "ci_run": r.ci_run, "ci_url": r.ci_url, "checkpoint_sha256": r.checkpoint_sha256,
                        "golden_manifest_sha256": r.golden_manifest_sha256, "passed": r.passed, "rows": [vars(row) for row in r.rows]}
                       for r in shown], indent=2) + "\n"
