"""Diagnostics that say *why* a row looks the way it does: batch-size agreement, run-to-run
determinism, cost, and where in the network an artifact departs from eager.

Measuring lives in ``shapes`` (the batch-size plan, its runs and their measures), ``layers`` (one module per per-layer
method), ``determinism`` and ``run`` (the rows compared, ``rows_of``; the rerun and the latency, from the replay's
own outputs and timings); its records are ``measurements``' (batch-size runs,
latency, per-layer tables, the eager self-check). Nothing here judges or words a finding: ``judge``
turns the records into verdicts (its records live in ``results``), ``messages`` words them.

Bounds, decided once here (and documented in docs/explanation/reports-and-diagnostics.md):

* batch-size agreement: at every batch size ``b`` (1, an odd size, the main size, the whole probe
  in one batch), the artifact's outputs for the probe images must pass the row's own gate against
  eager's outputs for the same images at the same batch size ``b`` (agreement counted only where at
  least ``gates.MIN_AGREEMENT_IMAGES`` images ran). How far each one moves from its own output at the main
  size (and how far eager does) says why a size fails: specialised by the export, moving with the
  batch by design (only a kind whose row says its int8 activation scales are dynamic), or a model that
  itself depends on the batch.
* determinism: the same input run twice may differ by at most a tenth of the float MAE gate
  (``1e-6`` by default) in any value, for every kind. Measured: exactly 0 for all six kinds.
"""

from __future__ import annotations

from ..config import LATENCY_REPEATS, SMALL_MODEL_PARAMETERS  # noqa: F401  (the plan's constants: config.py, which the cache key reads too)
