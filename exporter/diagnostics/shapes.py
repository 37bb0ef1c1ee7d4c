"""Dynamic-shape validation: replay an artifact at several batch sizes and require per-image agreement.

An export can silently specialise the batch size: ``torch.jit.trace`` records ``int(x.shape[0])`` or
``x.view(16, -1)`` as the constant of its example batch, and a simplifier can fold a dynamic axis
into a fixed one. The golden replay runs at one batch size and never notices; this check runs the
same images at batch size 1, an odd size, the main size and the whole probe in one batch, and
compares each image's logits with its logits at the main size.

>>> plan_sizes(16, 64)
(1, 7, 16, 64)
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..feeds import Feeds, length, take
from ..signature import SINGLE, Signature
from . import BatchSizeRun

Infer = Callable[[Feeds], np.ndarray]
# Images the check runs: the first PROBE_IMAGES of the golden set (or the main batch, if larger).
PROBE_IMAGES = 64


def plan_sizes(main: int, probe: int) -> tuple[int, ...]:
    """Batch sizes to try: 1, an odd size other than the main one, the main size and the whole probe."""
    main = min(main, probe)
    odd = 7 if main != 7 else 3
    return tuple(sorted(s for s in {1, odd, main, probe} if 1 <= s <= probe))


def images_at(size: int, main: int, probe: int) -> int:
    """How many probe images run at ``size``: all at the main and full sizes, a few at the small ones."""
    if size >= min(main, probe):
        return probe
    return min(probe, max(2 * size, 8))


class RowCountError(ValueError):
    pass


def run_sizes(infer: Infer, images: Feeds, sizes: tuple[int, ...], main: int, signature: Signature = SINGLE) -> dict[int, np.ndarray | str]:
    """Outputs of ``infer`` (feeds in, one output row per sample out) over the probe at each size,
    or the error text when a size fails."""
    out: dict[int, np.ndarray | str] = {}
    for size in sizes:
        count = images_at(size, main, length(images, signature))
        try:
            parts = []
            for start in range(0, count, size):
                chunk = take(images, signature, start, min(start + size, count))
                got = infer(chunk)
                n = length(chunk, signature)
                if got.shape[0] != n:
                    raise RowCountError(f"returned {got.shape[0]} output rows for {n} inputs")
                parts.append(got)
            out[size] = np.concatenate(parts)
        except Exception as exc:  # any failure at a size is this check's finding, not a crash
            out[size] = describe_failure(exc)
    return out


def describe_failure(exc: BaseException) -> str:
    """One line: a TorchScript interpreter error's last line holds the actual error, so keep that."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if len(lines) > 1:
        return lines[-1][:300]
    return f"{type(exc).__name__}: {lines[0][:300]}" if lines else type(exc).__name__


def _per_image_mae(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.shape != b.shape:
        raise RowCountError(f"output shape {tuple(a.shape)} != {tuple(b.shape)} at the main batch size")
    diff = np.abs(a.astype(np.float64) - b.astype(np.float64)).reshape(len(a), -1)
    diff = np.where(np.isfinite(diff), diff, np.inf)
    return diff.mean(axis=1) if diff.shape[1] else np.zeros(len(a))


def measure(artifact: dict[int, np.ndarray | str], eager: dict[int, np.ndarray | str], main: int) -> tuple[BatchSizeRun, ...]:
    """Compare every size with the main size, per image, for the artifact and for eager."""
    main = min(main, max(artifact))
    runs = []
    for size in sorted(artifact):
        got, reference = artifact[size], artifact[main]
        eager_got, eager_ref = eager.get(size), eager.get(main)
        eager_dev = None
        if isinstance(eager_got, np.ndarray) and isinstance(eager_ref, np.ndarray):
            eager_dev = _per_image_mae(eager_got, eager_ref[: len(eager_got)])
        eager_error = eager_got if isinstance(eager_got, str) else None
        if isinstance(reference, str):
            runs.append(BatchSizeRun(size, 0, None, None, None, f"fails at the main batch size {main}: {reference}", eager_error))
            continue
        if isinstance(got, str):
            runs.append(BatchSizeRun(size, 0, None, None, None if eager_dev is None else float(eager_dev.max()), got, eager_error))
            continue
        try:
            dev = _per_image_mae(got, reference[: len(got)])
        except RowCountError as exc:
            runs.append(BatchSizeRun(size, len(got), None, None, None, str(exc), eager_error))
            continue
        allowance = eager_dev if eager_dev is not None else np.zeros_like(dev)
        excess = dev - allowance
        worst = int(np.argmax(excess)) if len(excess) else 0
        runs.append(
            BatchSizeRun(
                size=size,
                images=len(got),
                max_image_mae=float(dev.max()) if len(dev) else 0.0,
                worst_image=worst,
                eager_max_image_mae=None if eager_dev is None else float(eager_dev.max()),
                error=None,
                eager_error=eager_error,
                excess=float(excess[worst]) if len(excess) else 0.0,
            )
        )
    return tuple(runs)
