"""The bisection's search on releases judged by a fake replay (no install): it finds the first release that differs
from the baseline as the full sweep does, within 1 + ceil(log2 N) replays when every release installs, and steps
over releases that cannot install."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from export_check.bisect import ReleaseResult, RowResult, Search, bisect_search, changes, max_replays, sweep, verdict_changed


def _release(version: str, status: str, mae: float | None, skipped: str | None = None) -> ReleaseResult:
    rows = () if skipped else (RowResult("onnx-int8-dynamic", status, mae, None if status == "pass" else "NOT_IMPLEMENTED : ConvInteger(10)"),)
    return ReleaseResult(version, rows, skipped, True, 0.5, 1.0, f"/envs/{version}", ())


class FakeProbe:
    """Release i replays as an error before ``step`` and a pass from it on; those in ``broken`` cannot install."""

    def __init__(self, search: Search, step: int, broken: set[int]) -> None:
        self.search, self.step, self.broken, self.calls = search, step, broken, 0

    def __call__(self, version: str) -> ReleaseResult:
        if version not in self.search.results:
            self.calls += 1
            i = self.search.releases.index(version)
            self.search.results[version] = _release(version, "pass" if i >= self.step else "error", 0.058 if i >= self.step else None,
                                                    "cannot install on this Python: no wheel for cp311" if i in self.broken else None)
        return self.search.results[version]


def _search(n: int) -> Search:
    return Search("onnxruntime", "m.bundle", "bisection", tuple(f"1.{i}.0" for i in range(n)), 0.1)


@given(n=st.integers(1, 40), data=st.data())
def test_bisection_finds_the_sweeps_boundary_in_at_most_1_plus_ceil_log2_n_replays(n: int, data: st.DataObject) -> None:
    step = data.draw(st.integers(1, n))  # n: no release changes
    broken = data.draw(st.sets(st.integers(0, n - 1), max_size=n // 3))
    fast, full = _search(n), _search(n)
    probe = FakeProbe(fast, step, broken)
    bisect_search(fast, probe)
    sweep(full, FakeProbe(full, step, broken))
    tested = [i for i in range(n) if i not in broken]
    if len(tested) < 2 or step > tested[-1] or step <= tested[0]:
        assert fast.boundary is None and full.boundary is None
        return
    first = min(i for i in tested if i >= step)
    assert fast.boundary == full.boundary and fast.boundary is not None
    assert fast.boundary.after == f"1.{first}.0" and fast.boundary.before == f"1.{max(i for i in tested if i < step)}.0"
    assert fast.boundary.untested_between == tuple(f"1.{i}.0" for i in range(int(fast.boundary.before.split(".")[1]) + 1, first))
    if not broken:
        assert probe.calls <= max_replays(n) <= math.ceil(math.log2(n)) + 2


def test_twenty_releases_take_six_replays_and_an_mae_move_counts_only_beyond_the_bound() -> None:
    calls = []
    for step in range(1, 21):  # every place the change can be, and none (20)
        search = _search(20)
        probe = FakeProbe(search, step, set())
        bisect_search(search, probe)
        calls.append(probe.calls)
        assert (search.boundary.after if search.boundary else None) == (f"1.{step}.0" if step < 20 else None)
    assert max(calls) == 6 == max_replays(20)
    a, b = _release("1", "pass", 0.100), _release("2", "pass", 0.109)
    assert changes(a, b, 0.1) == [] and changes(a, _release("3", "pass", 0.112), 0.1) == [
        "onnx-int8-dynamic: MAE 0.1 -> 0.112 (moved by more than 0.1 of it)"]
    assert changes(_release("4", "error", None), a, 0.1) == ["onnx-int8-dynamic: error -> pass (MAE - -> 0.1)"]
    assert verdict_changed(_release("4", "error", None), a) and not verdict_changed(a, b)
