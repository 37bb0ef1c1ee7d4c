"""Diagnostics that say *why* a row looks the way it does: batch-size agreement, run-to-run
determinism, cost, and where in the network an artifact departs from eager.

Measuring lives in ``shapes``, ``divergence``, ``determinism`` and ``run`` (the rerun and the latency,
from the replay's own outputs and timings); its records are ``measurements``' (batch-size runs,
latency, per-layer tables, the eager self-check). Nothing here judges or words a finding: ``judge``
turns the records into verdicts (its records live in ``results``), ``messages`` words them.

Bounds, decided once here (and documented in docs/explanation/reports-and-diagnostics.md):

* batch-size agreement: at every batch size ``b`` (1, an odd size, the main size, the whole probe
  in one batch), the artifact's outputs for the probe images must pass the row's own gate against
  eager's outputs for the same images at the same batch size ``b`` (agreement counted only where at
  least ``judge.MIN_AGREEMENT_IMAGES`` images ran). How far each one moves from its own output at the main
  size (and how far eager does) says why a size fails: specialised by the export, moving with the
  batch by design (only a kind whose row says its int8 activation scales are dynamic), or a model that
  itself depends on the batch.
* determinism: the same input run twice may differ by at most a tenth of the float MAE gate
  (``1e-6`` by default) in any value, for every kind. Measured: exactly 0 for all six kinds.
"""

from __future__ import annotations

# Repeats of the timed batch for the latency median (after one warm-up run).
LATENCY_REPEATS = 5
# A model of at most this many parameters always runs the full plan of issue 12 (the bundled digit models hold
# 20,000-160,000, the catalogue's CleanLarge 3.4 million, MobileNetV2 3.5 million; each costs 0.05-0.4 s per row at
# the full plan on digits); a larger one gets the budget's share (ResNet-50: 25.6 million, 0.2-0.7 s per image).
# The plan is decided by the model and the set alone, never by a clock: the
# same check plans the same runs on any machine under any load (issue 44: under load the bundled ResNet measured
# 10.2 ms per image and lost its checks to a seconds-per-image rule), and the cache keys on that rule (cache/key.py).
SMALL_MODEL_PARAMETERS = 5_000_000
