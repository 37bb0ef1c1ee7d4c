"""While a TorchScript runner is open, a large activation freed by one call is reused by the next one
(no fresh, kernel-zeroed pages), and glibc's defaults come back when the last runner closes
(exporter/artifacts/_heap.py; measured on ResNet-50 in docs/explanation/performance.md)."""

from __future__ import annotations

import resource

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from export_check.artifacts._common import TorchScriptRunner  # noqa: E402
from export_check.artifacts._heap import _glibc  # noqa: E402

pytestmark = [pytest.mark.skipif(_glibc() is None, reason="the heap hold is a glibc setting; this C library keeps its own behaviour"),
              pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")]  # torch.jit.script/load say they are deprecated

FLOATS = 12 << 20  # a 48 MB activation: above glibc's largest mmap threshold (32 MB), like ResNet-50's at batch 16
CALLS = 12
WARM_UP = 8  # calls over which the held heap grows to fit the allocation pattern (measured: 1-7)


class Widen(torch.nn.Module):
    """Allocates (and writes) a 48 MB activation on every call, and frees it before returning."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        big = torch.empty(12 << 20)
        big.fill_(1.0)
        return (big[:10].clone() * x.sum() + x).reshape(1, 10)


def faults(call, times: int = CALLS) -> int:
    """Minor page faults of this thread over ``times`` calls."""
    before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    for _ in range(times):
        call()
    return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before


@pytest.fixture
def scripted(tmp_path):
    path = tmp_path / "widen.pt"
    torch.jit.save(torch.jit.script(Widen().eval()), str(path))
    return path


def rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize() / 2**20


def _raw(path):
    loaded = torch.jit.load(str(path))
    call = lambda: loaded(torch.ones(1, 10))  # noqa: E731  (the module outside any runner)
    call(), call()  # the profiling executor's first runs
    return call


def test_runner_reuses_large_activations_and_restores_glibc_after(scripted):
    raw = _raw(scripted)
    fresh = faults(raw)
    # Measured: each call outside a runner maps and zero-fills 24-48 MB of new pages (6,144+ faults);
    # inside, the heap grows over the first calls, then its freed blocks are reused (0 faults a call).
    assert fresh >= CALLS * 4000, f"outside a runner every call maps new pages: {fresh} faults in {CALLS} calls"
    feeds = {"input": np.ones((1, 10), np.float32)}
    with TorchScriptRunner(scripted) as runner:
        assert runner.heap_reused
        first = runner.infer(feeds)
        faults(lambda: runner.infer(feeds), WARM_UP)
        held = faults(lambda: runner.infer(feeds))
        again = runner.infer(feeds)
        holding = rss_mb()  # the freed activations stay resident for the next call
    released = rss_mb()
    assert held < fresh / 2, f"inside the runner freed activations are reused: {held} faults in {CALLS} calls, {fresh} outside"
    np.testing.assert_array_equal(first["logits"], again["logits"])
    np.testing.assert_array_equal(first["logits"], raw().numpy())  # the same numbers as the module run outside
    assert holding - released >= 40, f"closing the runner hands the held heap back: RSS {holding:.0f} MB inside, {released:.0f} MB after"


def test_hold_lasts_until_the_last_open_runner_closes(scripted):
    raw = _raw(scripted)
    fresh = faults(raw)
    feeds = {"input": np.ones((1, 10), np.float32)}
    with TorchScriptRunner(scripted) as outer:
        with TorchScriptRunner(scripted) as inner:
            assert inner.heap_reused
            faults(lambda: inner.infer(feeds), WARM_UP)
        faults(lambda: outer.infer(feeds), WARM_UP)
        still = faults(lambda: outer.infer(feeds))
        holding = rss_mb()
    assert still < fresh / 2, f"the outer runner still holds the heap after the inner one closed: {still} faults, {fresh} outside"
    assert holding - rss_mb() >= 40, "the heap is handed back when the outer one closes too"
