"""The model under test: checkpoint + architecture -> an eval-mode CPU module, run with pinned threads.

``EagerRunner`` is the eager model behind the same runner contract as every artifact
(``artifacts.base.Runner``: named inputs in, named outputs out), so the replay, the diagnostics and
the golden lifecycle all run eager through the one helper here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .artifacts.base import named_outputs, single_input
from .config import TORCH_INTEROP_THREADS


@contextlib.contextmanager
def pinned_threads(threads: int) -> Iterator[None]:
    """Fix torch's intra-op thread count for the run (it changes both speed and numbers), then restore it."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    if torch.get_num_interop_threads() != TORCH_INTEROP_THREADS:
        # torch allows this once per process, before any inter-op work; later runs in the same process keep it.
        with contextlib.suppress(RuntimeError):
            torch.set_num_interop_threads(TORCH_INTEROP_THREADS)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def load_model(checkpoint: Path, arch: str, arch_kwargs: dict[str, Any], arch_root: Path | None) -> Any:
    """The architecture built and loaded with the checkpoint's weights (read safely), in eval mode on the CPU."""
    from .checkpoint import build_model, load_state_dict

    state = load_state_dict(checkpoint)
    return build_model(arch, arch_kwargs, state, checkpoint, arch_root)


class EagerRunner:
    """The eager model as a runner: ``infer({"input": batch}) -> {"logits": ...}`` under inference mode."""

    name = "the eager model"

    def __init__(self, model: Any) -> None:
        self.model = model

    def __enter__(self) -> EagerRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def infer(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        import torch

        with torch.inference_mode():
            return named_outputs(self.model(torch.from_numpy(single_input(feeds))), self.name)


def eager_logits(model: Any, batch: np.ndarray) -> np.ndarray:
    """Eager's logits for one batch (the one eager-inference helper)."""
    from .artifacts.base import logits_of

    return logits_of(EagerRunner(model).infer({"input": batch}), EagerRunner.name)
