"""``export-check bisect BUNDLE --runtime NAME``: the first release of a runtime that judges a bundle
differently, found by bisection over the releases the package index offers.

Each tested release gets its own cached, torch-free environment (``runtime_envs``) and the bundle is
replayed there by the existing replay (``export-check replay``, run by that environment's python), so a
release's numbers are exactly what a target with that release installed reports. Two releases *differ*
when any row of that runtime changes its verdict, or its MAE moves by more than ``bound`` (relative, of
the larger of the two) between them.

The bisection looks for the first release that differs from the oldest one it can install (the
baseline), assuming a change, once made, stays: ``ceil(log2 N)`` releases are replayed besides the
baseline for ``N`` releases after it (20 releases: 6 environments). A release that cannot install here
is reported and stepped over. ``--all`` replays every release and names each boundary between two
neighbours; ``--newest`` replays the newest release of each runtime of the bundle and compares each row's
verdict with the build's (exit 1 when upgrading would change one).
"""

from __future__ import annotations

import math
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .runtime_envs import RUNTIMES, RuntimeEnv, ensure_env, held, list_releases, version_key

Progress = Callable[[str], None]
DEFAULT_BOUND = 0.1  # an MAE that moves by more than 10% between two releases is a change
REPLAY_TIMEOUT = 1800.0


@dataclass(frozen=True)
class RowResult:
    """One row of one release: its verdict, its MAE (None when it has none) and, for an error or a
    failure, the reason in the runtime's words."""

    name: str
    status: str
    mae: float | None
    error: str | None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "mae": self.mae, "error": self.error}


@dataclass(frozen=True)
class ReleaseResult:
    """One release: its rows when it was replayed; else why it could not be (``skipped``)."""

    version: str
    rows: tuple[RowResult, ...]
    skipped: str | None
    installed: bool  # its environment was made by this run
    install_seconds: float
    replay_seconds: float
    env: str
    commands: tuple[str, ...]

    @property
    def tested(self) -> bool:
        return self.skipped is None

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "tested": self.tested, "skipped": self.skipped, "installed": self.installed,
                "install_seconds": round(self.install_seconds, 3), "replay_seconds": round(self.replay_seconds, 3), "env": self.env,
                "commands": list(self.commands), "rows": [r.to_json() for r in self.rows]}


def changes(before: ReleaseResult, after: ReleaseResult, bound: float) -> list[str]:
    """How ``after`` judges differently from ``before``: one line per row whose verdict changed or whose
    MAE moved by more than ``bound`` of the larger MAE; [] when they agree."""
    old = {r.name: r for r in before.rows}
    found = []
    for row in after.rows:
        was = old.get(row.name)
        if was is None:
            continue
        if was.status != row.status:
            found.append(f"{row.name}: {was.status} -> {row.status} (MAE {_num(was.mae)} -> {_num(row.mae)})")
        elif was.mae is not None and row.mae is not None and abs(row.mae - was.mae) > bound * max(abs(row.mae), abs(was.mae)):
            found.append(f"{row.name}: MAE {_num(was.mae)} -> {_num(row.mae)} (moved by more than {bound:g} of it)")
    return found


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


@dataclass(frozen=True)
class Boundary:
    """The first release (``after``) that judges differently from the release tested before it (``before``)."""

    before: str
    after: str
    changes: tuple[str, ...]
    untested_between: tuple[str, ...]  # releases between them that could not be installed

    def to_json(self) -> dict[str, Any]:
        return {"before": self.before, "after": self.after, "changes": list(self.changes), "untested_between": list(self.untested_between)}


@dataclass
class Search:
    """What a bisection or sweep found: every release it replayed or skipped (oldest first), the boundary."""

    runtime: str
    bundle: str
    mode: str  # "bisection", "all" or "newest"
    releases: tuple[str, ...]  # the range searched
    bound: float
    results: dict[str, ReleaseResult] = field(default_factory=dict)
    boundaries: list[Boundary] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def boundary(self) -> Boundary | None:
        return self.boundaries[0] if self.boundaries else None

    def ordered(self) -> list[ReleaseResult]:
        return [self.results[v] for v in sorted(self.results, key=version_key)]

    @property
    def installs(self) -> int:
        return sum(r.installed for r in self.results.values())

    @property
    def replays(self) -> int:
        return sum(r.tested for r in self.results.values())

    def to_json(self) -> dict[str, Any]:
        return {"schema": "export-check-bisect", "runtime": self.runtime, "bundle": self.bundle, "mode": self.mode,
                "releases": list(self.releases), "mae_bound": self.bound, "boundary": None if self.boundary is None else self.boundary.to_json(),
                "boundaries": [b.to_json() for b in self.boundaries], "replayed": self.replays, "installed": self.installs,
                "most_replays": max_replays(len(self.releases)), "seconds": round(self.seconds, 3),
                "results": [r.to_json() for r in self.ordered()]}


def max_replays(n: int) -> int:
    """The releases a bisection of ``n`` replays when every one installs: the baseline, then ``ceil(log2 n)`` to
    tell which of the ``n - 1`` after it is the first to differ, or that none does.

    >>> max_replays(20), max_replays(7), max_replays(1)
    (6, 4, 1)
    """
    return 1 + (math.ceil(math.log2(n)) if n > 1 else 0)


def select(releases: list[str], first: str | None, last: str | None, dist: str) -> list[str]:
    """The releases from ``first`` to ``last`` (either end open), or one line naming what the index offers."""
    from .errors import UsageError

    for flag, wanted in (("--from", first), ("--to", last)):
        if wanted is not None and wanted not in releases:
            raise UsageError(f"{flag} {wanted}: the package index offers no {dist} {wanted}; it offers {', '.join(releases)}")
    low = version_key(first) if first else ()
    high = version_key(last) if last else (math.inf,)
    chosen = [v for v in releases if low <= version_key(v) <= high]
    if not chosen:
        raise UsageError(f"--from {first} --to {last}: no {dist} release lies in that range; it offers {', '.join(releases)}")
    return chosen


def _rows_of(report: dict[str, Any], kind_runtime: str) -> tuple[RowResult, ...]:
    from .artifacts import KINDS_BY_NAME

    rows = []
    for row in report.get("rows") or []:
        kind = KINDS_BY_NAME.get(row.get("name"))
        if kind is None or kind.runtime != kind_runtime:
            continue
        metrics = row.get("metrics") or {}
        reasons = row.get("reasons") or []
        error = str(reasons[0]) if reasons and row.get("status") in ("error", "fail", "not-applicable") else None
        rows.append(RowResult(str(row["name"]), str(row["status"]), metrics.get("mae"), error))
    return tuple(rows)


def replay_release(env: RuntimeEnv, bundle: Path, work: Path) -> tuple[tuple[RowResult, ...] | None, str | None, float]:
    """The bundle replayed by the python of ``env`` (``export-check replay``): its rows of that runtime,
    or None and why the replay itself could not run; and the seconds it took."""
    from .parsing import load_json
    from .report.seal import reader_key, verified

    out = work / f"{env.dist}-{env.version}"
    report = out.with_suffix(".json")
    started = time.perf_counter()
    with held(env):
        done = subprocess.run([str(env.python), "-m", "export_check", "replay", str(bundle), "--target", f"{env.dist} {env.version}",
                               "--out", str(out), "--json", str(report), "-q"], capture_output=True, text=True, timeout=REPLAY_TIMEOUT)
    seconds = time.perf_counter() - started
    if done.returncode not in (0, 1) or not report.is_file():
        said = [ln for ln in done.stderr.splitlines() if ln.strip()]
        return None, f"the replay with {env.dist} {env.version} did not run: {(said or ['exit ' + str(done.returncode)])[-1][:400]}", seconds
    body = verified(report, report.read_bytes(), reader_key)
    return _rows_of(load_json(body.decode("utf-8"), report), RUNTIMES[env.dist].kind_runtime), None, seconds


class Prober:
    """Replays the bundle in each release's environment once; later asks read the result."""

    def __init__(self, search: Search, bundle: Path, cache_dir: Path, work: Path, progress: Progress) -> None:
        self.search, self.bundle, self.cache_dir, self.work, self.progress = search, bundle, cache_dir, work, progress

    def __call__(self, version: str) -> ReleaseResult:
        known = self.search.results.get(version)
        if known is not None:
            return known
        self.progress(f"bisect: {self.search.runtime} {version}: environment")
        env = ensure_env(self.cache_dir, self.search.runtime, version)
        if env.installed:
            self.progress("  " + "\n  ".join(env.commands))
        rows, why, seconds = (None, env.error, 0.0) if env.error else replay_release(env, self.bundle, self.work)
        result = ReleaseResult(version, rows or (), why, env.installed, env.seconds, seconds, str(env.path), env.commands)
        self.progress(f"bisect: {self.search.runtime} {version}: " + (why or ", ".join(f"{r.name} {r.status} {_num(r.mae)}" for r in result.rows)))
        self.search.results[version] = result
        return result


def _nearest_tested(probe: Prober, releases: tuple[str, ...], lo: int, hi: int, mid: int) -> int | None:
    """The index in [lo, hi) nearest ``mid`` whose release replays (releases that cannot install are stepped over)."""
    for step in range(hi - lo):
        for index in (mid + step, mid - step - 1):
            if lo <= index < hi and probe(releases[index]).tested:
                return index
    return None


def bisect_search(search: Search, probe: Prober) -> None:
    """The first release differing from the baseline, by bisection (fills ``search.boundaries``)."""
    releases = search.releases
    base = next((i for i, v in enumerate(releases) if probe(v).tested), None)
    if base is None:
        return
    baseline = probe(releases[base])
    lo, hi = base + 1, len(releases)  # the first differing index lies in [lo, hi]; hi == len: none differs
    while lo < hi:
        index = _nearest_tested(probe, releases, lo, hi, (lo + hi) // 2)
        if index is None:
            break  # nothing between lo and hi installs: the boundary, if any, lies at hi
        if changes(baseline, probe(releases[index]), search.bound):
            hi = index
        else:
            lo = index + 1
    if hi < len(releases):
        before = max(i for i in range(base, hi) if search.results.get(releases[i]) and search.results[releases[i]].tested)
        _add_boundary(search, before, hi)


def _add_boundary(search: Search, before: int, after: int) -> None:
    releases = search.releases
    first, second = search.results[releases[before]], search.results[releases[after]]
    search.boundaries.append(Boundary(first.version, second.version, tuple(changes(first, second, search.bound)),
                                      tuple(v for v in releases[before + 1:after])))


def sweep(search: Search, probe: Prober) -> None:
    """Every release replayed; a boundary wherever a release differs from the last one tested before it."""
    previous = None
    for index, version in enumerate(search.releases):
        if not probe(version).tested:
            continue
        if previous is not None and changes(search.results[search.releases[previous]], search.results[version], search.bound):
            _add_boundary(search, previous, index)
        previous = index


def run_bisect(bundle: Path, dist: str, cache_dir: Path, first: str | None = None, last: str | None = None, every: bool = False,
               bound: float = DEFAULT_BOUND, progress: Progress = lambda _: None) -> Search:
    """``export-check bisect``: the releases of ``dist`` the index offers from ``first`` to ``last``,
    bisected (or every one, ``every``) over the bundle at ``bundle``."""
    started = time.perf_counter()
    releases = select(list_releases(dist), first, last, dist)
    search = Search(dist, str(bundle), "all" if every else "bisection", tuple(releases), bound)
    with tempfile.TemporaryDirectory(prefix="export-check-bisect-") as work:
        probe = Prober(search, bundle.resolve(), cache_dir, Path(work), progress)
        (sweep if every else bisect_search)(search, probe)
    search.seconds = time.perf_counter() - started
    return search


def verdict_changed(before: ReleaseResult, after: ReleaseResult) -> bool:
    old = {r.name: r.status for r in before.rows}
    return any(old.get(r.name, r.status) != r.status for r in after.rows)


def bundle_runtimes(manifest: dict[str, Any]) -> dict[str, ReleaseResult]:
    """Per runtime distribution the bundle has rows of, the build machine's verdicts and MAEs as a release named "build"."""
    from .artifacts import KINDS_BY_NAME

    dists = {r.kind_runtime: r.dist for r in RUNTIMES.values()}
    found: dict[str, list[RowResult]] = {}
    for artifact in manifest.get("artifacts") or []:
        kind = KINDS_BY_NAME.get(artifact.get("name"))
        if kind is None or kind.runtime not in dists:
            continue
        build = artifact.get("build") or {}
        mae = (build.get("metrics") or {}).get("mae")
        found.setdefault(dists[kind.runtime], []).append(RowResult(kind.name, str(build.get("status")), mae, None))
    return {dist: ReleaseResult("build", tuple(rows), None, False, 0.0, 0.0, "(the build machine)", ()) for dist, rows in found.items()}


def run_newest(bundle: Path, manifest: dict[str, Any], cache_dir: Path, only: str | None = None, bound: float = DEFAULT_BOUND,
               progress: Progress = lambda _: None) -> list[Search]:
    """``bisect --newest``: each runtime of the bundle (or ``only``) at the newest release the index offers,
    against the build's verdicts; a boundary where upgrading changes a verdict or moves an MAE."""
    from .errors import UsageError

    builds = bundle_runtimes(manifest)
    if only is not None:
        if only not in builds:
            raise UsageError(f"{bundle}: holds no row the {only} runtime replays; its runtimes: {', '.join(builds) or 'none bisect installs'}")
        builds = {only: builds[only]}
    if not builds:
        raise UsageError(f"{bundle}: holds no row of a runtime bisect installs ({', '.join(RUNTIMES)})")
    searches = []
    with tempfile.TemporaryDirectory(prefix="export-check-newest-") as work:
        for dist, build in builds.items():
            started = time.perf_counter()
            newest = list_releases(dist)[-1]
            search = Search(dist, str(bundle), "newest", (newest,), bound, {"build": build})
            result = Prober(search, bundle.resolve(), cache_dir, Path(work), progress)(newest)
            moved = changes(build, result, bound) if result.tested else []
            if moved:
                search.boundaries.append(Boundary("build", newest, tuple(moved), ()))
            search.seconds = time.perf_counter() - started
            searches.append(search)
    return searches
