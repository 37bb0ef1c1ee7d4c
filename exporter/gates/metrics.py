"""The gate metrics, one entry each in ``GATE_METRICS``: the one module a new gate metric touches.

An entry holds every fact about one bound a gate can put on an output: the ``Gate`` keyword(s) and
option names that set it, which gate families offer it, how a gate shows it, the value it reads from
:class:`compare.Metrics` and in which direction it gates, why a row fails it, whether it is judged at
every batch size, how eager's own run-to-run noise widens it, and, for a value ``compare`` does not measure
itself, the stream that measures it (``key`` and ``stream``: see ``_streamed``). The families' options (``families``),
the judging (``judging``), ``Gate`` and its JSON all read this table, and a replay measures every entry's stream
(``STREAMS``, passed to each ``compare.ErrorAccumulator``: ``Thresholds.accumulator``). A new gate metric is one entry
here plus its function (its reason, or its stream: a class with ``add`` and ``value``, numpy imported inside it), and
nothing else, as tests/unit/gates/test_metrics.py shows on a copy of the package.

>>> [m.name for m in GATE_METRICS][:3], BOUNDS["min_top1"].option
(['MAE', 'relative MAE', 'top-1 agreement'], 'min-top1')
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .agreement import PER_SAMPLE, agreement_name, flips_text

if TYPE_CHECKING:
    from ..compare import Layout, Metrics, Stream, StreamFactory
    from ..records import EagerSelfCheck


class GateLike(Protocol):
    """What an entry's functions read of a gate (``gate.Gate``, which reads this table: typed so, neither imports the other back)."""

    @property
    def tolerance(self) -> tuple[float, float] | None: ...

    def __getattr__(self, name: str) -> Any: ...


@dataclass(frozen=True)
class Bound:
    """One ``Gate`` keyword: ``max_mae`` is set by ``--max-mae`` (the float family) and ``--int8-max-mae``."""

    field: str
    title: str  # how an error names it: "max MAE"
    option: str  # the option's stem: a family's option is "<family>-<stem>" (the float family's: the stem)
    help: str  # with {what} (the family's rows) and {default}
    metavar: str = "X"
    unset: float | None = None  # the value that does not gate (min_top1: 0)
    fraction: bool = False  # a value in [0, 1]
    count: bool = False  # a whole number >= 1 (top_k)


@dataclass(frozen=True)
class GateMetric:
    """One entry of the table (see the module's docstring)."""

    name: str
    bounds: tuple[Bound, ...]
    shown: Callable[[GateLike], str | None]  # the gate's bound as the reports show it, None when unset: "MAE<=1e-05"
    reason: Callable[[Metrics, GateLike], str | None]  # why ``metrics`` fail this bound; None when they meet it or it is unset
    families: str = "all"  # which gate families offer its options: "all", or "relative" (int8, fp16, bf16 only)
    # The gate asks for a value this observation does not hold (measured before the metric existed, or
    # without that allclose pair): never passed, the observation is measured again (judge.layers_missing).
    missing: Callable[[Metrics, GateLike], bool] = lambda metrics, gate: False
    at_batch_sizes: bool = True  # also judged against eager at every batch size (else: the replay's values only)
    # The bound widened by eager's own run-to-run noise (judge.with_noise), for a model that draws random numbers.
    noise: Callable[[float, EagerSelfCheck], float] | None = None
    # A column of its own in the verbose terminal table (the default table shows MAE, max|err|, top-1):
    # its title, and the cell of a row's metrics.
    column: str | None = None
    cell: Callable[[Metrics], str] = lambda metrics: "-"
    # A value measured by a stream of its own (cosine, SNR, CER): stored in ``Metrics.streamed`` and the JSON's metrics under
    # ``key`` (``Metrics.stat(key)``), measured by what ``stream`` makes of an output's layout (None: it does not apply).
    key: str | None = None
    stream: StreamFactory | None = None


def _below(what: str, value: float, bound: float, shown: str = ".6g") -> str:
    """``value < bound`` in words that never read "1 < 1": when the two print alike, the gap is said instead (issue 44).

    >>> _below("cosine similarity", 0.99999997, 1.0)
    'cosine similarity 1 is below 1 by 3e-08'
    >>> _below("cosine similarity", 0.98, 0.99)
    'cosine similarity 0.98 < 0.99'
    """
    if format(value, shown) != format(bound, "g"):
        return f"{what} {value:{shown}} < {bound:g}"
    return f"{what} {value:{shown}} is below {bound:g} by {bound - value:.2g}"


def _scalar(name: str, bound: Bound, direction: str, read: Callable[[Metrics], float | None], shown: str | Callable[[float], str],
            failed: Callable[[Metrics, float, float], str], *, applies: Callable[[Metrics], bool] = lambda m: True,
            families: str = "all", at_batch_sizes: bool = True,
            noise: Callable[[float, EagerSelfCheck], float] | None = None, column: str | None = None,
            cell: str = "{:.3g}", key: str | None = None, stream: StreamFactory | None = None) -> GateMetric:
    """A metric bounded by one number: ``direction`` "max" (the value must be at most the bound) or
    "min" (at least). ``read`` None where ``applies``: the value was not measured (a reason, never a pass);
    where it does not apply (no argmax of a values output), the bound does not gate."""

    show = shown.format if isinstance(shown, str) else shown

    def value_of(gate: GateLike) -> float | None:
        value = getattr(gate, bound.field)
        return None if value is None or value == bound.unset else value

    def reason(metrics: Metrics, gate: GateLike) -> str | None:
        limit = value_of(gate)
        if limit is None or not applies(metrics):
            return None
        value = read(metrics)
        if value is None:
            return f"{name} was not measured for this output"
        ok = value <= limit if direction == "max" else value >= limit
        return None if ok else failed(metrics, value, limit)

    def missing(metrics: Metrics, gate: GateLike) -> bool:
        return value_of(gate) is not None and applies(metrics) and read(metrics) is None

    def shown_of(gate: GateLike) -> str | None:
        limit = value_of(gate)
        return None if limit is None else show(limit)

    def cell_of(metrics: Metrics) -> str:
        value = read(metrics)
        return "-" if value is None else cell.format(value)

    return GateMetric(name, (bound,), shown_of, reason, families=families, missing=missing, at_batch_sizes=at_batch_sizes,
                      noise=noise, column=column, cell=cell_of, key=key, stream=stream)


def _streamed(name: str, key: str, stream: StreamFactory, bound: Bound, direction: str, shown: str | Callable[[float], str],
              failed: Callable[[Metrics, float, float], str], **options: Any) -> GateMetric:
    """A metric bounded by one number (``_scalar``) whose value ``stream`` measures: a replay measures it on every output
    it applies to (``STREAMS``), and the JSON's metrics hold it under ``key``."""
    return _scalar(name, bound, direction, lambda metrics: metrics.stat(key), shown, failed, key=key, stream=stream, **options)


# The streams the entries below measure (gates/streams.py), imported when a replay makes one: the gates import no numpy.
def _least_cosine(layout: Layout) -> Stream | None:
    from .streams import LeastCosine

    return LeastCosine()


def _signal_to_noise(layout: Layout) -> Stream | None:
    from .streams import SignalToNoise

    return SignalToNoise()


def _character_error_rate(layout: Layout) -> Stream | None:
    from .streams import CharacterErrorRate

    return CharacterErrorRate.of(layout)  # a CTC output's only


def _top1_reason(metrics: Metrics, value: float, bound: float) -> str:
    text = f"{agreement_name(metrics)} {value:.1%} < {bound:.1%}"
    if metrics.agreement not in PER_SAMPLE or not metrics.images:  # per position: a count of positions, not of samples
        return text
    beside = ("" if metrics.position_agreement is None or metrics.agreement != "decoded"
              else f"; per-position agreement {metrics.position_agreement:.1%}")  # what blank frames hide
    return f"{text} ({flips_text(len(metrics.top1_changed), metrics.images, bound)}{beside})"


def _at(metrics: Metrics) -> str:
    return "" if metrics.max_abs_at is None else f" (at {metrics.max_abs_at.describe()})"


def _relative_shown(value: float) -> str:
    return f"relMAE<={value:.3g}" if value * 100 % 1 else f"relMAE<={value:.0%}"


def _tolerance_shown(gate: GateLike) -> str | None:
    pair = gate.tolerance
    return None if pair is None else f"atol={pair[0]:g} rtol={pair[1]:g}"


def _tolerance_reason(metrics: Metrics, gate: GateLike) -> str | None:
    """The allclose part of ``gate``: how many values break ``|a - b| <= atol + rtol * |b|``, and the worst."""
    if gate.tolerance is None:
        return None
    atol, rtol = gate.tolerance
    count = metrics.tolerance(atol, rtol)
    if count is None:  # never silently passed: a measurement that lacks it is observed again (judge.layers_missing)
        return f"allclose(atol={atol:g}, rtol={rtol:g}) was not measured for this output"
    if not count.violations:
        return None
    worst = ""
    if count.worst is not None:
        w = count.worst
        worst = f"; worst {w.describe()} (|err| {abs(w.candidate - w.reference):.3g} > {atol + rtol * abs(w.reference):.3g})"
    return (f"allclose(atol={atol:g}, rtol={rtol:g}): {count.violations} of {count.values} values "
            f"outside atol + rtol*|reference|{worst}")


def _tolerance_missing(metrics: Metrics, gate: GateLike) -> bool:
    return gate.tolerance is not None and metrics.tolerance(*gate.tolerance) is None


def _top1_noise(bound: float, check: EagerSelfCheck) -> float:
    return max(0.0, min(bound, 1.0 - 2 * (1.0 - (1.0 if check.agreement is None else check.agreement))))


DEFAULT_TOP_K = 5


def top_k_of(gate: GateLike) -> int | None:
    """The k of ``gate``'s top-k agreement bound (``top_k``, 5 by default), or None when it sets none."""
    return None if gate.min_topk is None else int(gate.top_k or DEFAULT_TOP_K)


def _topk_shown(gate: GateLike) -> str | None:
    k = top_k_of(gate)
    return None if k is None else f"top{k}>={gate.min_topk:.0%}"


def _topk_reason(metrics: Metrics, gate: GateLike) -> str | None:
    k = top_k_of(gate)
    if k is None or metrics.agreement != "top-1":  # a ranking of classes: logits only
        return None
    value = metrics.topk_agreement(k)
    if value is None:
        return f"top-{k} agreement was not measured for this output"
    if value >= gate.min_topk:
        return None
    return f"top-{k} agreement {value:.1%} < {gate.min_topk:.1%} (samples whose {k} highest classes are the reference's)"


def _topk_missing(metrics: Metrics, gate: GateLike) -> bool:
    k = top_k_of(gate)
    return k is not None and metrics.agreement == "top-1" and metrics.topk_agreement(k) is None


GATE_METRICS: tuple[GateMetric, ...] = (
    _scalar("MAE", Bound("max_mae", "max MAE", "max-mae", "MAE gate of {what} (default: {default})"),
            "max", lambda m: m.mae, "MAE<={:g}", lambda m, v, b: f"MAE {v:.3g} > {b:g}",
            noise=lambda b, c: b + 2 * c.mae),
    _scalar("relative MAE", Bound("max_relative_mae", "max relative MAE", "max-relative-mae",
                                  "relative MAE gate of {what}: MAE over the mean |reference| of the output (default: {default})"),
            "max", lambda m: m.relative_mae, _relative_shown,
            lambda m, v, b: f"relative MAE {v:.3g} > {b:g} (MAE {m.mae:.3g} over a mean |reference| of {m.reference_mean_abs:.3g})",
            families="relative", noise=lambda b, c: b + 2 * c.mae / max(c.reference_mean_abs, 1e-12)),
    _scalar("top-1 agreement", Bound("min_top1", "min top-1 agreement", "min-top1",
                                     "top-1 agreement gate of {what}, a fraction (default: {default})", "F", unset=0.0, fraction=True),
            "min", lambda m: m.top1_agreement, "top1>={:.0%}", _top1_reason,
            applies=lambda m: m.top1_agreement is not None, families="relative", noise=_top1_noise),
    _scalar("max abs error", Bound("max_abs", "max abs error", "max-abs", "no value of {what} may differ by more than this (default: {default})"),
            "max", lambda m: m.max_abs, "max<={:g}", lambda m, v, b: f"max abs error {v:.3g} > {b:g}{_at(m)}",
            noise=lambda b, c: b + 2 * c.max_abs),
    GateMetric("allclose",
               (Bound("atol", "atol", "atol", "allclose gate of {what}: every value within atol + rtol * |reference| "
                                              "(numpy.allclose; rtol 0 unless set; default: {default})"),
                Bound("rtol", "rtol", "rtol", "the relative tolerance of the allclose gate of {what} (atol 0 unless set; default: {default})")),
               _tolerance_shown, _tolerance_reason, missing=_tolerance_missing, at_batch_sizes=False),
    # The least cosine similarity of any one sample's output with its reference (flattened): an
    # embedding or a row of logits pointing elsewhere, whatever its scale (streams.LeastCosine).
    _streamed("cosine similarity", "cosine", _least_cosine,
              Bound("min_cosine", "min cosine similarity", "min-cosine",
                    "cosine similarity gate of {what}: no sample's output may have a lower cosine with its reference "
                    "(default: {default})", "F", fraction=True),
              "min", "cos>={:g}", lambda m, v, b: f"{_below('cosine similarity', v, b)} (the least of any sample)",
              at_batch_sizes=False, column="cos", cell="{:.6f}"),
    # Top-k agreement: the samples whose k highest classes are the reference's k highest (as a set: a ranking
    # that keeps its head); k from top_k (5 unless set). Measured for the k a gate asks (Thresholds.top_ks).
    GateMetric("top-k agreement",
               (Bound("min_topk", "min top-k agreement", "min-topk", "top-k agreement gate of {what}: at least this fraction of "
                                                                    "samples keep the reference's k highest classes (default: {default})",
                      "F", fraction=True),
                Bound("top_k", "top-k", "top-k", "the k of the top-k agreement gate of {what} (default: 5 when min-topk is set)", "K",
                      count=True)),
               _topk_shown, _topk_reason, missing=_topk_missing, at_batch_sizes=False),
    # Task accuracy on the golden set's labels, against the reference's on the same samples (eager's; for the
    # eager row, the approved outputs'): percentage points lost. Not gated by default; a set without labels has none.
    _scalar("accuracy drop", Bound("max_accuracy_drop", "max accuracy drop", "max-accuracy-drop",
                                   "label-accuracy gate of {what}: at most this many percentage points of top-1 accuracy on the golden "
                                   "labels lost against the reference (default: {default})", "POINTS"),
            "max", lambda m: m.accuracy_drop, "accdrop<={:g}pt",
            lambda m, v, b: f"label accuracy {m.label_accuracy:.1%} against the reference's {m.reference_label_accuracy:.1%}: "
                            f"a drop of {v:.2f} points > {b:g}",
            applies=lambda m: m.labelled != 0, at_batch_sizes=False, column="acc drop", cell="{:.2f}pt"),
    # The output's signal-to-noise ratio in dB: 10 log10(sum reference^2 / sum error^2) (streams.SignalToNoise).
    _streamed("SNR", "snr_db", _signal_to_noise,
              Bound("min_snr_db", "min SNR", "min-snr",
                    "signal-to-noise gate of {what} in dB: 10 log10(sum reference^2 / sum error^2) (default: {default})", "DB"),
              "min", "SNR>={:g}dB", lambda m, v, b: f"SNR {v:.3g} dB < {b:g} dB", at_batch_sizes=False, column="SNR dB", cell="{:.1f}"),
    # A CTC output's character error rate (a sequence output with ctc-blank): the edit distance of each sample's
    # greedy decoding from the reference's, summed, over the reference texts' length (streams.CharacterErrorRate).
    _streamed("character error rate", "cer", _character_error_rate,
              Bound("max_cer", "max character error rate", "max-cer",
                    "character error rate gate of {what}'s CTC outputs (those with ctc-blank): edit distance "
                    "of the greedy decodings over the reference's characters, a fraction (default: {default})", "F"),
              "max", "CER<={:.3g}",
              lambda m, v, b: f"character error rate {v:.2%} > {b:.2%} (greedy CTC decoding; {len(m.top1_changed)} of {m.images} "
                              f"samples' decoded text changed)",
              applies=lambda m: m.agreement == "decoded", at_batch_sizes=False, column="CER", cell="{:.2%}"),
)
BOUNDS: dict[str, Bound] = {b.field: b for m in GATE_METRICS for b in m.bounds}
assert len(BOUNDS) == sum(len(m.bounds) for m in GATE_METRICS), "gate fields must be unique"
# The streams the gates read, key -> factory: what a replay passes every ErrorAccumulator (Thresholds.accumulator).
STREAMS: dict[str, StreamFactory] = {m.key: m.stream for m in GATE_METRICS if m.key is not None and m.stream is not None}
assert len(STREAMS) == sum(m.stream is not None for m in GATE_METRICS), "each stream needs a key of its own"


def streams_of(gate: GateLike) -> dict[str, StreamFactory]:
    """The streams of the metrics ``gate`` bounds: all a judge of one tensor needs (run/explain.py: a bisection's inner tensors).

    >>> from export_check.gates import Gate
    >>> list(streams_of(Gate(max_mae=1.0, min_cosine=0.9))), list(streams_of(Gate(max_mae=1.0)))
    (['cosine'], [])
    """
    bounded = set(gate.set_bounds())
    return {key: make for m in GATE_METRICS if (key := m.key) and (make := m.stream) and any(b.field in bounded for b in m.bounds)}


def default_text(bound: Bound, value: float | None) -> str:
    """A bound's default as an option's help shows it."""
    return "none" if value is None or value == bound.unset else f"{value:g}"
