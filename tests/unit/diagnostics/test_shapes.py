"""diagnostics/shapes.py: which batch sizes run, on how many images, within a budget; and what each size's outputs show."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from export_check.diagnostics.shapes import bounded_plan, full_plan, images_at, measure_output, plan_sizes, run_sizes
from export_check.feeds import Feeds

rng = np.random.default_rng(0)
WEIGHTS = rng.normal(size=(6, 10))
IMAGES = {"input": rng.normal(size=(64, 6))}


def linear(feeds: Feeds) -> np.ndarray:
    return feeds["input"] @ WEIGHTS


def batch_dependent(feeds: Feeds) -> np.ndarray:
    x = feeds["input"]
    return x @ WEIGHTS + (0.5 if len(x) == 7 else 0.0)  # a branch on the batch size


def fails_above_16(feeds: Feeds) -> np.ndarray:
    if len(feeds["input"]) > 16:
        raise RuntimeError("Expected batch size 16 but got 64\nstack trace follows")
    return linear(feeds)


@pytest.mark.parametrize(("main", "probe", "sizes"), [(16, 64, (1, 7, 16, 64)), (7, 64, (1, 3, 7, 64)), (128, 64, (1, 7, 64)),
                                                       (1, 1, (1,)), (4, 5, (1, 4, 5))])
def test_plan_sizes(main: int, probe: int, sizes: tuple[int, ...]) -> None:
    assert plan_sizes(main, probe) == sizes


@given(st.integers(1, 64), st.integers(1, 64))
def test_every_planned_size_runs_whole_batches_within_the_probe(main: int, probe: int) -> None:
    for size in plan_sizes(main, probe):
        n = images_at(size, main, probe)
        assert size <= n <= probe and (n % size == 0 or n == probe)


@given(st.integers(1, 64), st.integers(1, 128), st.floats(0, 2000), st.integers(0, 8))
def test_a_bounded_plan_fits_its_budget_or_is_the_minimum(main: int, probe: int, budget: float, topups: int) -> None:
    plan = bounded_plan(main, probe, budget, topups)
    full = full_plan(main, probe)
    if full.cost(topups) <= budget:
        assert plan == full and plan.cut == ()
    else:
        assert plan.cut and plan.cut[0] == "latency from the replay only" and not plan.topups
        assert plan.main in plan.sizes and 1 in plan.sizes
        minimum = bounded_plan(main, probe, 0, topups).cost(topups)
        assert plan.cost(topups) <= max(budget, minimum) and minimum <= 1 + main + probe


def test_a_size_that_fails_is_a_finding_not_a_crash() -> None:
    clock: dict[int, float] = {}
    out = run_sizes(fails_above_16, IMAGES, (1, 7, 16, 64), 16, clock=clock)
    assert sorted(clock) == [1, 7, 16, 64]
    assert isinstance(out[64], str) and "Expected batch size 16 but got 64" in out[64] and "\n" not in out[64]
    assert [len(out[s]) for s in (1, 7, 16)] == [images_at(1, 16, 64), images_at(7, 16, 64), 64]
    np.testing.assert_allclose(out[7], linear({"input": IMAGES["input"][: images_at(7, 16, 64)]}))


def test_a_model_that_returns_the_wrong_number_of_rows_is_named() -> None:
    out = run_sizes(lambda f: linear(f)[:1], IMAGES, (7,), 16)
    assert out[7] == "RowCountError: returned 1 output rows for 7 inputs"


def test_measure_finds_the_size_that_moves_and_whether_eager_moves_too() -> None:
    sizes = (1, 7, 16, 64)
    artifact = run_sizes(batch_dependent, IMAGES, sizes, 16)
    eager = run_sizes(linear, IMAGES, sizes, 16)
    runs = {r.size: r for r in measure_output(artifact, eager, 16)}
    # BLAS may block a matrix product differently by batch size: "no move" is below 1e-12, not exactly 0
    assert runs[7].mae == pytest.approx(0.5) and runs[7].moved == pytest.approx(0.5) and runs[7].eager_moved < 1e-12
    assert all(runs[s].mae < 1e-12 and runs[s].moved < 1e-12 for s in (1, 16, 64))
    assert runs[7].images == images_at(7, 16, 64) and runs[7].worst_image is not None


def test_measure_carries_errors_of_either_side() -> None:
    artifact = run_sizes(fails_above_16, IMAGES, (1, 16, 64), 16)
    eager = run_sizes(linear, IMAGES, (1, 16), 16)
    runs = {r.size: r for r in measure_output(artifact, eager, 16)}
    assert runs[64].error is not None and runs[64].images == 0 and runs[64].mae is None
    only_artifact = measure_output(run_sizes(linear, IMAGES, (1, 16, 64), 16), eager, 16)[-1]
    assert only_artifact.size == 64 and only_artifact.error == "eager was not run at this size"


class _Golden:
    """What the size check reads of a golden set: its length, signature and first approved output."""

    def __init__(self, count: int) -> None:
        from export_check.signature import SINGLE

        self.signature, self.count = SINGLE, count

    def __len__(self) -> int:
        return self.count

    def reference_outputs(self, start: int, count: int) -> dict[str, np.ndarray]:
        return {"logits": linear({"input": IMAGES["input"][start:start + count]})}


def _trace(outputs: list[np.ndarray]):
    from export_check.diagnostics.trace import EAGER, ReplayTrace

    trace = ReplayTrace.for_run(64, 16)
    for index, out in enumerate(outputs):
        start = 16 * index
        trace.add_eager(start, {"input": IMAGES["input"][start:start + 16]}, 16, out, 0.01)
    return trace, EAGER


def test_the_size_check_is_planned_before_the_replay_and_takes_eagers_main_size_from_it() -> None:
    from export_check.diagnostics.shapes import SizeCheck

    calls: list[int] = []

    def eager(feeds: Feeds) -> np.ndarray:
        calls.append(len(feeds["input"]))
        return linear(feeds)

    check = SizeCheck(eager, IMAGES, 64, _Golden(64), None, 16, 1e9)  # type: ignore[arg-type]
    assert check.plan.sizes == (1, 7, 16, 64) and set(check.eager_at) == {1, 7, 64} and 16 not in calls  # the replay runs 16
    replayed = [linear({"input": IMAGES["input"][i:i + 16]}) for i in range(0, 64, 16)]
    trace, _ = _trace(replayed)
    check.replayed(trace)
    np.testing.assert_array_equal(check.eager_at[16], np.concatenate(replayed))
    runs = {run.size: run for run in check.measure(batch_dependent, "row")[0].runs}
    assert runs[7].mae is not None and runs[7].mae > 0.4 and runs[16].mae == 0.0 and runs[1].mae == 0.0


def test_eager_outputs_that_change_shape_between_batches_are_eagers_error_at_the_main_size() -> None:
    from export_check.diagnostics.shapes import SizeCheck

    check = SizeCheck(linear, IMAGES, 64, _Golden(64), None, 16, 1e9)  # type: ignore[arg-type]
    wide = [linear({"input": IMAGES["input"][i:i + 16]}) for i in range(0, 64, 16)]
    wide[1] = np.concatenate([wide[1], wide[1]], axis=1)  # the second batch's rows twice as wide
    check.replayed(_trace(wide)[0])
    assert check.eager_at[16] == ("eager's outputs over the first 64 samples at batch size 16 are not one array: their shape changes "
                                  "from batch to batch")
    main = next(run for run in check.eager_runs().runs if run.size == 16)
    assert main.eager_error == check.eager_at[16] and main.mae is None
