"""Language models (issue 45): a generative golden set, the decode step with its KV cache in the forms
people ship, each file stepped token by token in its runtime, and verdicts on the tokens it generates.

Imported lazily: ``run_generation`` is what the check calls on a generative golden set.
"""

from __future__ import annotations

from typing import Any


def run_generation(config: Any, progress: Any = None, plant: Any = None) -> Any:
    from .run import run_generation as run

    return run(config, progress or (lambda _: None), plant)
