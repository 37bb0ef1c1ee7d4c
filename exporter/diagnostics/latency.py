"""Cost: median wall time per image of one batch at the run's fixed thread count. Reported, never gated."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import numpy as np

from . import LATENCY_REPEATS, Latency


def measure(infer: Callable[[np.ndarray], np.ndarray], batch: np.ndarray, threads: int, repeats: int = LATENCY_REPEATS) -> Latency:
    """One untimed warm-up run, then ``repeats`` timed runs of ``batch``; the median per image."""
    infer(batch)
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        infer(batch)
        samples.append((time.perf_counter() - started) * 1000.0 / len(batch))
    return Latency(
        ms_per_image=float(statistics.median(samples)),
        batch=len(batch),
        repeats=repeats,
        threads=threads,
        samples_ms=tuple(float(s) for s in samples),
    )
