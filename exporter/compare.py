"""Pure metrics: numpy arrays in, frozen results out. Nothing here runs a model or judges (``judge`` does).

Outputs are compared batch by batch (:class:`ErrorAccumulator`) so a golden set of any size costs
memory for one batch plus one float per image; besides its own figures it measures the streams it is given (gates.STREAMS).

>>> acc = ErrorAccumulator()
>>> acc.add(np.array([[1.0, 0.0]]), np.array([[1.0, 0.5]]))
>>> acc.result().mae
0.25
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from .ctc import decode_batch


class ShapeMismatch(ValueError):
    pass


class LabelMismatch(ValueError):
    """The golden labels of a sequence output do not have one class per position of its outputs."""


LABEL_PAD = np.iinfo(np.int64).min  # past the end of a sample's position labels (golden/labels.py keeps classes within 32 bits)


@dataclass(frozen=True)
class Element:
    """One output value: sample ``sample`` (along the batch axis), flat index ``index`` within it."""

    sample: int
    index: int
    reference: float
    candidate: float  # inf or nan when the candidate value is non-finite

    def describe(self) -> str:
        return f"sample {self.sample}, element {self.index}: {self.candidate:.8g} vs reference {self.reference:.8g}"

    def to_json(self) -> dict[str, Any]:
        return {"sample": self.sample, "index": self.index, "reference": self.reference, "candidate": self.candidate}


@dataclass(frozen=True)
class Tolerance:
    """An elementwise allclose count: how many values break ``|candidate - reference| <= atol + rtol * |reference|``
    (``numpy.allclose`` with the reference as ``b``, computed in float64; a non-finite candidate value
    always breaks it), out of ``values``, and the worst of them: the one furthest above its bound."""

    atol: float
    rtol: float
    values: int = 0
    violations: int = 0
    worst: Element | None = None  # None when nothing breaks it
    worst_excess: float = 0.0  # |candidate - reference| minus its allowed bound, for ``worst``

    def key(self) -> tuple[float, float]:
        return (self.atol, self.rtol)

    def to_json(self) -> dict[str, Any]:
        return {"atol": self.atol, "rtol": self.rtol, "values": self.values, "violations": self.violations,
                "worst": None if self.worst is None else {**self.worst.to_json(), "excess": self.worst_excess}}


@dataclass(frozen=True)
class Metrics:
    """How far a candidate output is from a reference output over a whole set.

    ``agreement`` says what ``top1_agreement`` counts: ``top-1`` (samples whose argmax over the class
    axis matches: logits), ``per-position`` (positions whose argmax matches: sequence logits),
    ``decoded`` (samples whose greedy CTC text matches: a sequence output with a declared blank; its
    per-position figure is ``position_agreement``, its character error rate the stream ``cer``) or
    ``none`` (values: boxes, embeddings, masks; then no argmax is taken, ``top1_agreement`` is
    ``None``, shown as a dash and ``null``, and never gates).
    ``relative_mae`` is the MAE over the mean absolute reference value: the scale-free error the
    non-float gates (int8) are judged by.
    """

    images: int
    mae: float
    max_abs: float
    median_abs: float  # median of the per-image MAE
    top1_agreement: float | None  # fraction of samples (or positions) whose argmax matches; None: none computed
    top1_changed: tuple[int, ...]  # indices of samples whose argmax differs (anywhere, for sequences)
    nonfinite: int  # NaN or Inf values in the candidate
    per_image_mae: tuple[float, ...] = field(repr=False)
    reference_mean_abs: float = 0.0
    agreement: str = "top-1"
    max_abs_at: Element | None = None  # where the largest absolute error is (None: no values, or no error at all)
    tolerances: tuple[Tolerance, ...] = ()  # the allclose counts the run's gates asked for (gates.Thresholds.tolerances)
    streamed: tuple[tuple[str, float], ...] = ()  # the values of the streams measured, by key (cosine, snr_db: gates.STREAMS)
    output: str | None = None  # a row's headline over several outputs: the output these are (judge.headline); None: the only one
    topk: tuple[tuple[int, float], ...] = ()  # (k, agreement) for each k the run's gates asked (gates.Thresholds.top_ks)
    # Task accuracy on the golden set's labels (the primary logits output): samples labelled (0: the set has no
    # labels; None: measured before labels were counted), those the candidate's and the reference's argmax get right.
    labelled: int | None = None
    label_correct: int = 0
    reference_label_correct: int = 0
    # A sequence-logits output's share of positions whose argmax matches (None: not a sequence output): its
    # agreement figure, or beside it when the output is judged on its decoded text (agreement "decoded").
    position_agreement: float | None = None

    def tolerance(self, atol: float, rtol: float) -> Tolerance | None:
        """The allclose count for ``(atol, rtol)``, if it was measured."""
        return next((t for t in self.tolerances if t.key() == (atol, rtol)), None)

    def topk_agreement(self, k: int) -> float | None:
        """The share of samples whose ``k`` highest classes are the reference's, if it was measured."""
        return dict(self.topk).get(k)

    @property
    def label_accuracy(self) -> float | None:
        return self.label_correct / self.labelled if self.labelled else None

    @property
    def reference_label_accuracy(self) -> float | None:
        return self.reference_label_correct / self.labelled if self.labelled else None

    @property
    def accuracy_drop(self) -> float | None:
        """Percentage points of label accuracy lost against the reference (eager, or the approved outputs for eager)."""
        if not self.labelled:
            return None
        return 100.0 * (self.reference_label_correct - self.label_correct) / self.labelled

    def stat(self, name: str) -> float | None:
        """The value of the stream ``name`` (``OWN_STREAMS``, or one the accumulator was given), None when it was not measured."""
        return dict(self.streamed).get(name)

    @property
    def relative_mae(self) -> float:
        if self.reference_mean_abs > 0:
            return self.mae / self.reference_mean_abs
        return 0.0 if self.mae == 0 else float("inf")

    def to_json(self) -> dict[str, Any]:
        return {
            "images": self.images,
            "mae": self.mae,
            "max_abs": self.max_abs,
            "median_image_mae": self.median_abs,
            "top1_agreement": self.top1_agreement,
            "top1_changed": list(self.top1_changed),
            "nonfinite": self.nonfinite,
            "per_image_mae": list(self.per_image_mae),
            "relative_mae": self.relative_mae,
            "reference_mean_abs": self.reference_mean_abs,
            "agreement": self.agreement,
            "max_abs_at": None if self.max_abs_at is None else self.max_abs_at.to_json(),
            "tolerances": [t.to_json() for t in self.tolerances],
            "output": self.output,
            "topk_agreement": {str(k): v for k, v in self.topk},
            "labelled": self.labelled,
            "label_accuracy": self.label_accuracy,
            "reference_label_accuracy": self.reference_label_accuracy,
            "accuracy_drop": self.accuracy_drop,
            **dict(self.streamed),
            **({} if self.position_agreement is None else {"position_agreement": self.position_agreement}),
        }


AGREEMENT = {"logits": "top-1", "sequence-logits": "per-position", "values": "none"}
DECODED = "decoded"  # the agreement of a sequence-logits output with a CTC blank: its decoded texts'


@dataclass(frozen=True)
class Layout:
    """What a stream may need to know of an output: its kind, its class axis (on the sample-first array)
    and its CTC blank (None: none declared)."""

    kind: str = "logits"
    class_axis: int = -1
    ctc_blank: int | None = None

    @property
    def ctc(self) -> bool:
        return self.ctc_blank is not None and self.kind == "sequence-logits"

    @property
    def agreement(self) -> str:
        """What agreement means for the output (``Metrics.agreement``): its decoded texts' for a CTC output, else its kind's."""
        return DECODED if self.ctc else AGREEMENT.get(self.kind, "top-1")


class Stream(Protocol):
    """A metric streamed over the set, batch by batch: ``add`` takes one batch of reference and
    candidate values, float64, samples on axis 0 in the output's own shape, and the mask of the
    candidate's finite values."""

    def add(self, reference: np.ndarray, candidate: np.ndarray, finite: np.ndarray) -> None: ...

    def value(self) -> float: ...


StreamFactory = Callable[[Layout], Stream | None]  # a stream for an output of this layout; None: it does not apply to it


class DecodedExactMatch:
    """The share of samples whose greedy CTC decoding (``ctc.decode_batch``) equals the reference's; ``changed``
    holds the indices of those whose text changed. A non-finite candidate score never wins a frame.

    >>> s = DecodedExactMatch(Layout("sequence-logits", -1, 0))
    >>> ref = np.array([[[0.0, 1.0], [0.0, 1.0]], [[1.0, 0.0], [0.0, 1.0]]])  # texts (1,) and (1,)
    >>> s.add(ref, np.array([[[0.0, 1.0], [1.0, 0.0]], [[1.0, 0.0], [1.0, 0.0]]]), np.ones((2, 2, 2), bool))
    >>> s.value(), s.changed
    (0.5, [1])
    """

    def __init__(self, layout: Layout) -> None:
        self.blank, self.class_axis = layout.ctc_blank, layout.class_axis
        self.changed: list[int] = []
        self._samples = 0

    @classmethod
    def of(cls, layout: Layout) -> DecodedExactMatch | None:
        return cls(layout) if layout.ctc else None

    def texts(self, reference: np.ndarray, candidate: np.ndarray, finite: np.ndarray) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
        assert self.blank is not None
        cand = np.where(finite, candidate, -np.inf)
        return list(zip(decode_batch(reference, self.blank, self.class_axis), decode_batch(cand, self.blank, self.class_axis), strict=True))

    def add(self, reference: np.ndarray, candidate: np.ndarray, finite: np.ndarray) -> None:
        pairs = self.texts(reference, candidate, finite)
        self.changed.extend(self._samples + i for i, (ref, cand) in enumerate(pairs) if ref != cand)
        self._samples += len(pairs)

    def value(self) -> float:
        return 1.0 - len(self.changed) / self._samples if self._samples else 1.0


# compare's own stream, measured wherever it applies: a CTC output's agreement (Metrics.top1_agreement). The streams
# a gate metric reads (cosine, SNR, CER) are its entry's, in gates.GATE_METRICS: whoever makes an accumulator for a
# replay passes them (gates.STREAMS). Each value is shown in Metrics' JSON under its key.
OWN_STREAMS: dict[str, StreamFactory] = {"decoded_exact_match": DecodedExactMatch.of}


class ErrorAccumulator:
    """Streams batches of (reference, candidate) outputs into :class:`Metrics`. Arrays have their
    samples on axis 0 (``to_samples_first`` moves a declared batch axis there); ``kind`` and
    ``class_axis`` (of the sample-first array) say what agreement means; ``tolerances``, the
    ``(atol, rtol)`` pairs whose elementwise allclose violations to count (a count and the worst
    value each: no arrays are kept); ``ctc_blank``, the blank class of a sequence output judged on its decoded text;
    ``streams``, the streams to measure besides ``OWN_STREAMS``, key -> factory, those that apply to the layout
    (``gates.STREAMS``: every one a gate reads; None: none)."""

    def __init__(self, kind: str = "logits", class_axis: int = -1, tolerances: tuple[tuple[float, float], ...] = (),
                 top_ks: tuple[int, ...] = (), ctc_blank: int | None = None, streams: Mapping[str, StreamFactory] | None = None) -> None:
        self.kind, self.class_axis = kind, class_axis
        layout = Layout(kind, class_axis, ctc_blank)
        self._decoded, self._agreement = layout.ctc, layout.agreement
        self._topk = dict.fromkeys(top_ks, 0)  # k -> samples whose k highest classes are the reference's
        self._tolerances = {pair: Tolerance(*pair) for pair in dict.fromkeys(tolerances)}
        self._max_abs_at: Element | None = None
        self._abs_sum = 0.0
        self._ref_abs_sum = 0.0
        self._values = 0
        self._max_abs = 0.0
        self._nonfinite = 0
        self._top1_changed: list[int] = []
        self._positions = 0
        self._positions_changed = 0
        self._per_image: list[np.ndarray] = []
        self._images = 0
        self._streams = _made(layout, streams or {})
        self._labelled = self._label_correct = self._reference_label_correct = 0

    def add(self, reference: np.ndarray, candidate: np.ndarray, labels: np.ndarray | None = None) -> None:
        """One batch. ``labels``: the golden labels of its samples (one class index each), for a logits output:
        task accuracy is counted for the candidate and the reference."""
        if reference.shape != candidate.shape:
            raise ShapeMismatch(f"output shape {tuple(candidate.shape)} != reference {tuple(reference.shape)}")
        if self.kind == "sequence-logits" and reference.ndim == 3:
            self._add_positions(reference, candidate, labels)
        ref = reference.astype(np.float64, copy=False).reshape(reference.shape[0], -1)
        cand = candidate.astype(np.float64, copy=False).reshape(candidate.shape[0], -1)
        finite = np.isfinite(cand)
        self._nonfinite += int(cand.size - np.count_nonzero(finite))
        # Non-finite values count as infinitely wrong: they can never hide inside an average.
        diff = np.where(finite, np.abs(cand - ref), np.inf)
        self._abs_sum += float(diff.sum())
        self._ref_abs_sum += float(np.abs(ref).sum())
        self._values += diff.size
        if diff.size:
            flat = int(np.argmax(diff))
            if diff.flat[flat] > self._max_abs:
                self._max_abs = float(diff.flat[flat])
                self._max_abs_at = self._element(flat, diff.shape[1], ref, cand)
        for pair, count in self._tolerances.items():
            self._tolerances[pair] = self._count(count, diff, ref, cand)
        for stream in self._streams.values():  # views in the output's own shape (ref and cand are C-contiguous)
            stream.add(ref.reshape(reference.shape), cand.reshape(candidate.shape), finite.reshape(candidate.shape))
        self._per_image.append(diff.mean(axis=1) if diff.shape[1] else np.zeros(diff.shape[0]))
        if self.kind == "logits" and cand.shape[1]:
            scores = np.where(finite, cand, -np.inf)  # a non-finite value never ranks first
            predicted, expected = np.argmax(scores, axis=1), np.argmax(ref, axis=1)
            changed = np.flatnonzero(predicted != expected)
            self._top1_changed.extend(int(i) + self._images for i in changed)
            for k in self._topk:
                width = min(k, cand.shape[1])
                mine = np.sort(np.argpartition(-scores, width - 1, axis=1)[:, :width], axis=1)
                theirs = np.sort(np.argpartition(-ref, width - 1, axis=1)[:, :width], axis=1)
                self._topk[k] += int((mine == theirs).all(axis=1).sum())
            if labels is not None and len(labels) == len(predicted):
                self._labelled += len(labels)
                self._label_correct += int((predicted == labels).sum())
                self._reference_label_correct += int((expected == labels).sum())
        self._images += ref.shape[0]

    def _element(self, flat: int, width: int, ref: np.ndarray, cand: np.ndarray) -> Element:
        sample, index = divmod(flat, width)
        return Element(sample=self._images + sample, index=index, reference=float(ref[sample, index]),
                       candidate=float(cand[sample, index]))

    def _count(self, count: Tolerance, diff: np.ndarray, ref: np.ndarray, cand: np.ndarray) -> Tolerance:
        """``count`` with one more batch: numpy.allclose's test, ``diff <= atol + rtol * |ref|``, per value."""
        excess = diff - (count.atol + count.rtol * np.abs(ref))
        broken = ~(excess <= 0)  # a NaN excess (an inf reference and candidate) breaks it too
        violations = int(np.count_nonzero(broken))
        worst, worst_excess = count.worst, count.worst_excess
        if violations:
            scored = np.where(broken, np.nan_to_num(excess, nan=np.inf), -np.inf)
            flat = int(np.argmax(scored))
            if worst is None or scored.flat[flat] > worst_excess:
                worst, worst_excess = self._element(flat, diff.shape[1], ref, cand), float(scored.flat[flat])
        return Tolerance(atol=count.atol, rtol=count.rtol, values=count.values + diff.size, violations=count.violations + violations,
                         worst=worst, worst_excess=worst_excess)

    def _add_positions(self, reference: np.ndarray, candidate: np.ndarray, labels: np.ndarray | None = None) -> None:
        axis = self.class_axis if self.class_axis >= 0 else reference.ndim + self.class_axis
        cand = np.where(np.isfinite(candidate), candidate, -np.inf)
        predicted, expected = np.argmax(cand, axis=axis), np.argmax(reference, axis=axis)  # (samples, positions)
        moved = predicted != expected
        if labels is not None and len(labels) == len(predicted):
            positions = predicted.reshape(len(predicted), -1).shape[1]
            given = (labels != LABEL_PAD).sum(axis=1)
            bad = np.flatnonzero(given != positions)
            if len(bad):
                raise LabelMismatch(f"its labels give {int(given[bad[0]])} positions for golden sample {self._images + int(bad[0])}, "
                                    f"its output has {positions}")
            labels = labels[:, :positions]
            known = labels >= 0  # a negative label: no label at that position (padding)
            self._labelled += int(known.sum())
            self._label_correct += int((predicted.reshape(labels.shape) == labels)[known].sum())
            self._reference_label_correct += int((expected.reshape(labels.shape) == labels)[known].sum())
        self._positions += moved.size
        self._positions_changed += int(moved.sum())
        self._top1_changed.extend(int(i) + self._images for i in np.flatnonzero(moved.reshape(moved.shape[0], -1).any(axis=1)))

    def result(self) -> Metrics:
        per_image = np.concatenate(self._per_image) if self._per_image else np.zeros(0)
        mae = self._abs_sum / self._values if self._values else 0.0
        positions = None
        changed = tuple(self._top1_changed)
        if self.kind == "sequence-logits":
            agreement = positions = 1.0 - self._positions_changed / self._positions if self._positions else 1.0
            exact = self._streams.get("decoded_exact_match")
            if self._decoded and isinstance(exact, DecodedExactMatch):  # judged on the decoded text: samples whose text changed
                agreement, changed = exact.value(), tuple(exact.changed)
        elif self.kind == "logits":
            agreement = 1.0 - len(self._top1_changed) / self._images if self._images else 1.0
        else:
            agreement = None  # values: no argmax, so no agreement figure (not a perfect one)
        return Metrics(
            images=self._images,
            mae=float(mae),
            max_abs=float(self._max_abs),
            median_abs=float(np.median(per_image)) if per_image.size else 0.0,
            top1_agreement=agreement,
            top1_changed=changed,
            nonfinite=self._nonfinite,
            per_image_mae=tuple(float(v) for v in per_image),
            reference_mean_abs=self._ref_abs_sum / self._values if self._values else 0.0,
            agreement=self._agreement,
            max_abs_at=self._max_abs_at,
            tolerances=tuple(self._tolerances.values()),
            streamed=tuple((name, stream.value()) for name, stream in self._streams.items()),
            topk=tuple((k, count / self._images if self._images else 1.0) for k, count in self._topk.items()) if self.kind == "logits" else (),
            labelled=self._labelled, label_correct=self._label_correct, reference_label_correct=self._reference_label_correct,
            position_agreement=positions,
        )


def _made(layout: Layout, streams: Mapping[str, StreamFactory]) -> dict[str, Stream]:
    """The streams that apply to ``layout`` in the order the JSON shows them: ``streams``, with each of ``OWN_STREAMS``
    before the first that builds on it (a CTC output's decoded agreement, then its CER), else after them all."""
    own = {key: stream for key, make in OWN_STREAMS.items() if (stream := make(layout)) is not None}
    made: dict[str, Stream] = {}
    for key, make in streams.items():
        if key not in own and (stream := make(layout)) is not None:
            made.update((k, s) for k, s in own.items() if isinstance(stream, type(s)))
            made[key] = stream
    return {**made, **own}


def to_samples_first(array: np.ndarray, batch_axis: int) -> np.ndarray:
    """``array`` with its batch axis moved to the front (a view)."""
    return array if batch_axis == 0 else np.moveaxis(array, batch_axis, 0)


def compare(reference: np.ndarray, candidate: np.ndarray, kind: str = "logits", tolerances: tuple[tuple[float, float], ...] = (),
            top_ks: tuple[int, ...] = (), streams: Mapping[str, StreamFactory] | None = None) -> Metrics:
    """Metrics of a whole candidate array against a whole reference array (``streams``: gates.STREAMS, every value a gate reads)."""
    acc = ErrorAccumulator(kind, tolerances=tolerances, top_ks=top_ks, streams=streams)
    acc.add(reference, candidate)
    return acc.result()
