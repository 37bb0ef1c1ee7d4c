"""The views of ``export-check bisect``: the text (the boundary first, then per release and row: verdict,
MAE and the error in the runtime's words), the JSON, and one HTML page with the MAE per release drawn
(``trend.trend_chart``, one point per release instead of per run)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from ..bisect import ReleaseResult, Search, verdict_changed


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.2e}"


def _headline(search: Search) -> list[str]:
    if search.mode == "newest":
        release = search.releases[0]
        done = search.results.get(release)
        if done is not None and not done.tested:
            return [f"{search.runtime} {release} (the newest) could not be judged: {done.skipped}"]
        if search.boundary is None:
            return [f"{search.runtime} {release} (the newest) judges every row as the build did: upgrading changes no verdict"]
        build = search.results["build"]
        verdicts = "changes a verdict" if done is not None and verdict_changed(build, done) else "changes no verdict, but moves an MAE"
        return [f"upgrading to {search.runtime} {release} (the newest) {verdicts}:", *(f"  {c}" for c in search.boundary.changes)]
    span = f"{search.releases[0]} .. {search.releases[-1]}" if len(search.releases) > 1 else search.releases[0]
    lines = [f"bisect {search.runtime} over {len(search.releases)} releases ({span}) of {search.bundle}: {search.replays} replayed, "
             f"{search.installs} environments installed ({search.mode}; a bisection replays at most {_most(search)} when all install) "
             f"in {search.seconds:.1f}s"]
    if not any(r.tested for r in search.results.values()):
        return [*lines, "no release in the range could be installed here: nothing was judged"]
    if search.boundary is None:
        return [*lines, f"no boundary: every release replayed judges each row as {search.releases[0]} does "
                        f"(verdicts, and MAE within {search.bound:g} of it)" + ("" if search.mode == "all" else
                                                                                  "; --all replays every release")]
    b = search.boundary
    lines.append(f"boundary: {search.runtime} {b.after} is the first release that judges differently from {b.before}:")
    lines += [f"  {c}" for c in b.changes]
    if b.untested_between:
        lines.append(f"  between them, {', '.join(b.untested_between)} could not be installed here: the change is in one of them or in {b.after}")
    lines += [f"further boundary: {x.before} -> {x.after}: {'; '.join(x.changes)}" for x in search.boundaries[1:]]
    return lines


def _most(search: Search) -> int:
    from ..bisect import max_replays

    return max_replays(len(search.releases))


def render_text(searches: list[Search]) -> str:
    """Per search: the boundary first, then one line per release and row, then how to make an environment by hand."""
    out: list[str] = []
    for search in searches:
        out += _headline(search)
        out.append("")
        out.append(f"{'release':<10} {'row':<20} {'verdict':<15} {'MAE':<9}  error in the runtime's words")
        for result in search.ordered():
            if not result.tested:
                out.append(f"{result.version:<10} {'-':<20} {'not installed':<15} {'-':<9}  {result.skipped}")
            for row in result.rows:
                out.append(f"{result.version:<10} {row.name:<20} {row.status.upper():<15} {_num(row.mae):<9}  {row.error or ''}".rstrip())
        made = next((r for r in search.ordered() if r.commands), None)
        if made is not None:
            out.append("")
            out.append(f"an environment by hand ({made.version}; the package itself is linked in as site-packages/export_check):")
            out += [f"  {c}" for c in made.commands]
        out.append("")
    return "\n".join(out)


def to_json(searches: list[Search]) -> dict[str, Any]:
    return {"schema": "export-check-bisect", "searches": [s.to_json() for s in searches]}


@dataclass(frozen=True)
class _Point:  # what trend_chart reads of a row
    status: str
    mae: float | None
    cached: bool = False


class _Release:  # what trend_chart reads of a run
    def __init__(self, result: ReleaseResult) -> None:
        self._rows = {r.name: _Point(r.status, r.mae) for r in result.rows}

    def row(self, name: str) -> _Point | None:
        return self._rows.get(name)


def render_html(searches: list[Search]) -> str:
    from .trend import CSS, _e, trend_chart

    body = []
    for search in searches:
        results = [r for r in search.ordered() if r.tested]
        names = list(dict.fromkeys(row.name for r in results for row in r.rows))
        body.append(f"<h1>export-check bisect: {_e(search.runtime)}</h1><pre>{_e(chr(10).join(_headline(search)))}</pre>")
        body.append(trend_chart(f"MAE per {search.runtime} release (log scale; a row with no MAE, an error, is not drawn)",
                                cast(Any, [_Release(r) for r in results]), names, lambda p: p.mae, log=True, unit=""))
        rows = "".join(f"<tr><td>{i + 1}</td><td>{_e(r.version)}</td>" + "".join(
            f"<td class='{_e(p.status)}'>{_e(p.status)} {_e(_num(p.mae))}</td>" for p in r.rows) + "</tr>" for i, r in enumerate(results))
        body.append("<table><tr><th>point</th><th>release</th>" + "".join(f"<th>{_e(n)}</th>" for n in names) + f"</tr>{rows}</table>")
    return ("<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'><title>export-check bisect</title>"
            f"<style>{CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def write(searches: list[Search], json_path: Path | None, html_path: Path | None) -> None:
    from . import write_text_atomic

    if json_path is not None:
        write_text_atomic(json_path, json.dumps(to_json(searches), indent=1) + "\n")
    if html_path is not None:
        write_text_atomic(html_path, render_html(searches))
