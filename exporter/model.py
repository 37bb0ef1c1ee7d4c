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

from .artifacts.base import INPUT, named_outputs, output_arrays, single_input
from .errors import ArtifactError
from .pinned import TORCH_INTEROP_THREADS
from .signature import SINGLE, InputSpec, Signature


@contextlib.contextmanager
def pinned_threads(threads: int) -> Iterator[None]:
    """Fix torch's intra-op thread count for the run (it changes both speed and numbers), then restore it."""
    from .config import MAX_THREADS
    from .errors import UsageError

    if not 1 <= threads <= MAX_THREADS:  # golden record/approve come here without a RunConfig
        raise UsageError(f"threads must be an integer from 1 to {MAX_THREADS}, got {threads}")
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


FACTORY_SECONDS_AT_LEAST = 10.0  # a build timeout chosen to cut builds short (a test's 0.01 s) does not cut the factory


def load_model(checkpoint: Path, arch: str, arch_kwargs: dict[str, Any], arch_root: Path | None,
               notes: list[str] | None = None, timeout: float | None = None) -> Any:
    """The architecture built and loaded with the checkpoint's weights (read safely), in eval mode on the CPU;
    ``notes`` gets what the user should know of the reading (the wrapper key a state_dict was under).

    The factory is the user's code, run in this process: with a ``timeout`` (the run's build timeout) a hang in it is
    cut after that, at least ``FACTORY_SECONDS_AT_LEAST`` (a Python-level wait; exporter/timelimit.py)."""
    from .checkpoint import build_model, load_state_dict
    from .errors import ArchitectureError
    from .timelimit import time_limit

    limit = max(timeout, FACTORY_SECONDS_AT_LEAST) if timeout else None
    with time_limit(limit, lambda: ArchitectureError(
            f"{arch}: building the model was still running after {limit:g} s (--build-timeout, at least "
            f"{FACTORY_SECONDS_AT_LEAST:g} s here); fix the factory, or raise --build-timeout if it is just slow")):
        state = load_state_dict(checkpoint, notes)
        return build_model(arch, arch_kwargs, state, checkpoint, arch_root)


def fingerprint(model: Any) -> str:
    """What tells two builds of a model apart beyond the checkpoint they read: every parameter's and buffer's name,
    shape and dtype, and the values of the buffers the checkpoint does not hold (non-persistent: made by the factory).
    The build server builds its own copy from a ``ModelRecipe`` and uses it only when this matches the run's."""
    import hashlib
    import itertools

    import torch

    digest = hashlib.sha256(f"{type(model).__qualname__} {model.training}\n".encode())  # a lone file's module name is per process
    persistent = set(model.state_dict())
    for name, tensor in itertools.chain(model.named_parameters(remove_duplicate=False), model.named_buffers(remove_duplicate=False)):
        digest.update(f"{name} {tuple(tensor.shape)} {tensor.dtype}\n".encode())
        if name not in persistent:
            digest.update(tensor.detach().contiguous().flatten().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def from_recipe(recipe: Any) -> Any:
    """The model a ``ModelRecipe`` describes, built here; ValueError when it is not the run's (its fingerprint differs)."""
    root = None if recipe.arch_root is None else Path(recipe.arch_root)
    model = load_model(Path(recipe.checkpoint), recipe.arch, dict(recipe.arch_kwargs), root)
    if fingerprint(model) != recipe.fingerprint:
        raise ValueError("the model built from its checkpoint here differs from the run's (a buffer its factory makes differs)")
    return model


class EagerRunner:
    """The eager model as a runner: named inputs in (by position in the signature's order, or by
    keyword), named outputs out (``signature.flatten_outputs``), under inference mode.

    With the format-1 signature (``SINGLE``) a bare tensor is ``logits``; with a signature of one
    output it takes that output's name; recording a new set (``signature=None``) names it ``output``.
    """

    name = "the eager model"

    def __init__(self, model: Any, signature: Signature | None = SINGLE) -> None:
        self.model = model
        self.signature = signature

    def __enter__(self) -> EagerRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def call(self, feeds: Mapping[str, np.ndarray]) -> Any:
        """The model's raw output for ``feeds`` (tensors in, whatever structure it returns out)."""
        import torch

        specs = self.signature.inputs if self.signature is not None else tuple(InputSpec(n) for n in feeds)
        missing = [s.name for s in specs if s.name not in feeds]
        if missing or len(feeds) != len(specs):
            raise ArtifactError(f"{self.name} takes inputs {', '.join(s.name for s in specs)}; got {', '.join(feeds)}")
        args = [torch.from_numpy(np.ascontiguousarray(feeds[s.name])) for s in specs if not s.keyword]
        kwargs = {s.name: torch.from_numpy(np.ascontiguousarray(feeds[s.name])) for s in specs if s.keyword}
        with torch.inference_mode():
            return self.model(*args, **kwargs)

    def infer(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.signature is SINGLE:
            return named_outputs(self.call({INPUT: single_input(feeds)}), self.name)
        bare = self.signature.outputs[0].name if self.signature is not None and len(self.signature.outputs) == 1 else "output"
        return output_arrays(self.call(feeds), self.name, bare)


def eager_logits(model: Any, batch: np.ndarray) -> np.ndarray:
    """Eager's logits for one batch (the one eager-inference helper)."""
    from .artifacts.base import logits_of

    return logits_of(EagerRunner(model).infer({INPUT: batch}), EagerRunner.name)
