"""``export-check history --html PATH``: the trend across runs as one self-contained page.

Two inline SVG plots (no scripts, no external URLs), one line per artifact across the runs shown:
MAE on a log scale, and latency per image. A value served from the cache (an earlier run's
measurement) is drawn as a hollow marker, a measured one filled; a failing or error row has a red
ring. Then the runs: time, commit (linked to the CI run when known), verdict.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable
from pathlib import Path

from ..history import HistoryRow, HistoryRun

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")
BAD = "#cf222e"
LOG_FLOOR = -9  # an MAE of exactly 0 is drawn at 1e-9, labelled 0
CSS = ("body{font:14px/1.45 -apple-system,'Segoe UI',Helvetica,Arial,sans-serif;margin:24px;color:#1f2328}"
       "table{border-collapse:collapse} th,td{border:1px solid #d0d7de;padding:3px 8px;text-align:left} th{background:#f6f8fa}"
       ".fail,.error{color:#cf222e;font-weight:600} .pass{color:#1a7f37;font-weight:600} .muted{color:#59636e}")


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _log(value: float) -> float:
    return float(LOG_FLOOR) if value <= 0 else max(float(LOG_FLOOR), math.log10(value))


def trend_chart(title: str, runs: list[HistoryRun], names: list[str], value: Callable[[HistoryRow], float | None], *,
                log: bool, unit: str) -> str:
    """One line per artifact across ``runs``; ``value`` picks the number of a row (``None``: not drawn)."""
    width, height, x0, y0, right, top = 900, 300, 70, 260, 880, 48
    points = {name: [(i, v, row) for i, run in enumerate(runs) if (row := run.row(name)) is not None and (v := value(row)) is not None
                     and math.isfinite(v)] for name in names}
    known = [v for series in points.values() for _, v, _ in series]
    if log:
        lo = int(math.floor(min((_log(v) for v in known), default=-7.0)))
        hi = max(lo + 1, int(math.ceil(max((_log(v) for v in known), default=-5.0))))
    else:
        lo, hi = 0, 1
        peak = max(known, default=1.0)
        scale = peak * 1.1 if peak > 0 else 1.0

    def y_of(v: float) -> float:
        if log:
            return y0 - (_log(v) - lo) / (hi - lo) * (y0 - top)
        return y0 - v / scale * (y0 - top)

    def x_of(i: int) -> float:
        return x0 + (i + 0.5) / max(len(runs), 1) * (right - x0)

    body = [f'<text x="0" y="14" font-weight="bold" font-size="12">{_e(title)}</text>']
    legend_x = x0
    colours = {name: PALETTE[k % len(PALETTE)] for k, name in enumerate(names)}
    for name in names:
        body.append(f'<rect x="{legend_x}" y="22" width="9" height="9" fill="{colours[name]}"/>')
        body.append(f'<text x="{legend_x + 12}" y="31">{_e(name)}</text>')
        legend_x += 24 + 7 * len(name)
    ticks = [(float(10**d) if d != LOG_FLOOR else 0.0, "0" if d == LOG_FLOOR else f"1e{d}") for d in range(lo, hi + 1)] if log else \
        [(scale * f, f"{scale * f:.3g} {unit}") for f in (0.0, 0.25, 0.5, 0.75, 1.0)]
    for tick, label in ticks:
        y = y_of(tick) if not (log and tick == 0.0) else y_of(10.0**LOG_FLOOR)
        body.append(f'<line x1="{x0}" y1="{y:.1f}" x2="{right}" y2="{y:.1f}" stroke="#eaeef2"/>')
        body.append(f'<text x="{x0 - 4}" y="{y + 4:.1f}" text-anchor="end" fill="#59636e">{_e(label)}</text>')
    for i in range(len(runs)):
        body.append(f'<text x="{x_of(i):.1f}" y="{y0 + 16}" text-anchor="middle" fill="#59636e">{i + 1}</text>')
    body.append(f'<text x="{(x0 + right) / 2}" y="{height - 4}" text-anchor="middle" fill="#59636e">run (oldest to newest shown)</text>')
    for name in names:
        series, colour = points[name], colours[name]
        if len(series) > 1:
            path = " ".join(f"{x_of(i):.1f},{y_of(v):.1f}" for i, v, _ in series)
            body.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="1.5" opacity="0.7"/>')
        for i, v, row in series:
            fill = "#ffffff" if row.cached else colour  # cached: an earlier run's numbers, hollow
            ring = BAD if row.status in ("fail", "error") else colour
            tip = f"{name} run {i + 1}: {v:.3g} {unit}{' (cached)' if row.cached else ''}, {row.status}"
            body.append(f'<circle cx="{x_of(i):.1f}" cy="{y_of(v):.1f}" r="4" fill="{fill}" stroke="{ring}" stroke-width="2" '
                        f'data-cached="{str(row.cached).lower()}"><title>{_e(tip)}</title></circle>')
    return (f'<svg role="img" aria-label="{_e(title)}" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
            f'font-family="Helvetica,Arial,sans-serif" font-size="11">' + "".join(body) + "</svg>")


def _run_table(runs: list[HistoryRun], first: int) -> str:
    head = "<tr><th>run</th><th>time</th><th>commit</th><th>CI run</th><th>checkpoint</th><th>verdict</th><th>cached rows</th></tr>"
    lines = []
    for k, run in enumerate(runs):
        verdict = "pass" if run.passed else "fail" if run.passed is False else "?"
        ci = "-" if run.ci_run is None else (f"<a href='{_e(run.ci_url)}'>{_e(run.ci_run)}</a>" if run.ci_url else _e(run.ci_run))
        cached = ", ".join(r.name for r in run.rows if r.cached) or "-"
        lines.append(f"<tr><td>{first + k}</td><td>{_e(run.time)}</td><td><code>{_e((run.commit or '-')[:12])}</code></td><td>{ci}</td>"
                     f"<td><code>{_e(run.checkpoint_sha256[:12])}</code></td><td class='{verdict}'>{verdict}</td><td>{_e(cached)}</td></tr>")
    return "<table>" + head + "".join(lines) + "</table>"


def render(runs: list[HistoryRun], last: int = 10, artifact: str | None = None) -> str:
    shown = runs[-last:] if last > 0 else runs
    names = list(dict.fromkeys(r.name for run in runs for r in run.rows))
    if artifact is not None:
        names = [artifact]  # render_trend has refused a name the history does not hold
    body = [f"<h1>export-check history: {len(runs)} runs, the last {len(shown)} shown</h1>",
            "<p class='muted'>Filled markers were measured by that run; hollow ones were served from the cache (an earlier "
            "run's measurement). A red ring: the row failed or was an error.</p>",
            trend_chart("MAE against the reference (log scale; 0 drawn at the bottom)", shown, names, lambda r: r.mae, log=True, unit=""),
            trend_chart("latency per image (ms)", shown, names, lambda r: r.latency_ms, log=False, unit="ms"),
            "<h2>Runs</h2>", _run_table(shown, len(runs) - len(shown) + 1)]
    return ("<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'><title>export-check history</title>"
            f"<style>{CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def write(runs: list[HistoryRun], path: Path, last: int = 10, artifact: str | None = None) -> None:
    """``export-check history --html PATH``: the trend as one self-contained page (inline SVG, no scripts)."""
    from . import write_text_atomic

    write_text_atomic(path, render(runs, last, artifact))
