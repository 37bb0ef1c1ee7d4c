"""Inputs and targets for the multi-input/output models (``models/multi_io.py``), built from scikit-learn's digits.

Everything starts from ``models.digits.load_digits_arrays()`` and its fixed split (training
examples from the 1437 training digits, held-out ones from the 360 test digits). Pixels are
``value / 16`` in [0, 1] with a 0 background, and each 8x8 digit is upscaled 2x to 16x16 by
pixel repetition where a model wants 16 px digits. Held-out sets come from seeded
``np.random.RandomState`` generators and are built item by item, so the first ``n`` items of a
set do not depend on its size: the golden samples (``make_multi_io_samples``) are a prefix of the
held-out sets the metrics are measured on.

Examples are returned as ``(inputs, target)`` with ``inputs`` a dict named after the model's
``forward`` parameters, each array WITHOUT the batch axis.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

from models.digits import digits_split, load_digits_arrays
from models.multi_io import PAD_ID

CANVAS = 32  # DigitDetector input side
DIGIT = 16  # an 8x8 digit upscaled 2x
SEQUENCE_LENGTHS = (3, 4, 5)  # digits per SequenceRecognizer image: W = 48, 64, 80
TOKEN_LENGTHS = (64, 48, 56, 40)  # TokenClassifier held-out/golden lengths, one per group
MIN_TOKENS, MAX_TOKENS = 40, 64  # training crop lengths for TokenClassifier
GROUP = 4  # held-out/golden items come in groups of GROUP with one shape
HELDOUT_SEED = {"digit_detector": 1, "sequence_recognizer": 2, "token_classifier": 3, "two_input_net": 4}

Example = tuple[dict[str, np.ndarray], Any]


@lru_cache(maxsize=1)
def load_split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(digits float32 N x 8 x 8 in [0, 1], labels int64 N, train_idx, test_idx)``; cached, do not modify."""
    images, labels = load_digits_arrays()
    train_idx, test_idx = digits_split(labels)
    return (images / 16.0).astype(np.float32), labels, train_idx, test_idx


def upscale(digit: np.ndarray) -> np.ndarray:
    """8x8 -> 16x16 by repeating every pixel 2x2."""
    return digit.repeat(2, axis=0).repeat(2, axis=1)


def detector_example(digit: np.ndarray, label: int, dy: int, dx: int) -> Example:
    """``x (1, 32, 32)`` with the upscaled digit at row ``dy``, column ``dx``; target ``(label, box)``.

    The box is the tight box of the digit's ink, ``(x0, y0, x1, y1) / 32`` with exclusive ``x1, y1``.
    """
    canvas = np.zeros((CANVAS, CANVAS), dtype=np.float32)
    big = upscale(digit)
    canvas[dy : dy + DIGIT, dx : dx + DIGIT] = big
    rows, cols = np.flatnonzero(big.any(1)), np.flatnonzero(big.any(0))
    box = np.array([dx + cols[0], dy + rows[0], dx + cols[-1] + 1, dy + rows[-1] + 1], dtype=np.float32) / CANVAS
    return {"x": canvas[None]}, (int(label), box)


def random_offsets(rng: np.random.RandomState) -> tuple[int, int]:
    dy, dx = rng.randint(0, CANVAS - DIGIT + 1, size=2)
    return int(dy), int(dx)


def sequence_example(digits: np.ndarray, labels: np.ndarray) -> Example:
    """``image (1, 16, 16 * k)``: the k upscaled digits side by side; target the k labels."""
    return {"image": np.concatenate([upscale(d) for d in digits], axis=1)[None]}, [int(v) for v in labels]


def tokens(digit: np.ndarray, length: int, padded_to: int | None = None) -> dict[str, np.ndarray]:
    """``input_ids, attention_mask (padded_to or length,)`` int64: the first ``length`` pixels in row-major order.

    Tokens are the raw intensities 0..16; positions past ``length`` hold :data:`PAD_ID` with mask 0.
    """
    total = length if padded_to is None else padded_to
    ids = np.full(total, PAD_ID, dtype=np.int64)
    ids[:length] = np.rint(digit.reshape(-1)[:length] * 16)
    mask = (np.arange(total) < length).astype(np.int64)
    return {"input_ids": ids, "attention_mask": mask}


def meta_features(digit: np.ndarray) -> np.ndarray:
    """``(4,)`` float32: mean ink, ink row centroid / 7, ink column centroid / 7, count of inked pixels / 64."""
    total = float(digit.sum())
    rows, cols = np.mgrid[0:8, 0:8]
    return np.array(
        [digit.mean(), (rows * digit).sum() / total / 7, (cols * digit).sum() / total / 7, (digit > 0).sum() / 64],
        dtype=np.float32,
    )


def two_input_example(digit: np.ndarray, label: int) -> Example:
    return {"image": digit[None].astype(np.float32), "meta": meta_features(digit)}, int(label)


def heldout(model: str, count: int) -> list[Example]:
    """The first ``count`` held-out examples of ``model`` (a key of :data:`HELDOUT_SEED`), from test digits only.

    * ``digit_detector``: test digit i at a seeded random offset;
    * ``sequence_recognizer``: k = 3, 4, 5 seeded random test digits, k changing every :data:`GROUP` items;
    * ``token_classifier``: test digit i cut to length :data:`TOKEN_LENGTHS` (changing every group);
      the last item of each group of length >= 48 holds 8 fewer real tokens plus 8 padding tokens;
    * ``two_input_net``: test digit i.
    """
    digits, labels, _, test_idx = load_split()
    rng = np.random.RandomState(HELDOUT_SEED[model])
    if model in ("digit_detector", "token_classifier", "two_input_net") and count > len(test_idx):
        raise ValueError(f"{model} has {len(test_idx)} held-out examples, asked for {count}")
    examples: list[Example] = []
    for i in range(count):
        group = i // GROUP
        if model == "sequence_recognizer":
            k = SEQUENCE_LENGTHS[group % len(SEQUENCE_LENGTHS)]
            chosen = test_idx[rng.randint(0, len(test_idx), size=k)]
            examples.append(sequence_example(digits[chosen], labels[chosen]))
            continue
        index = test_idx[i]
        digit, label = digits[index], int(labels[index])
        if model == "digit_detector":
            examples.append(detector_example(digit, label, *random_offsets(rng)))
        elif model == "token_classifier":
            length = TOKEN_LENGTHS[group % len(TOKEN_LENGTHS)]
            padded = i % GROUP == GROUP - 1 and length >= MIN_TOKENS + 8
            examples.append((tokens(digit, length - 8, padded_to=length) if padded else tokens(digit, length), label))
        elif model == "two_input_net":
            examples.append(two_input_example(digit, label))
        else:
            raise ValueError(f"unknown model {model!r}; expected one of {', '.join(HELDOUT_SEED)}")
    return examples


def stack(examples: list[Example]) -> dict[str, np.ndarray]:
    """Batch examples of one shape: each named input gains a leading batch axis."""
    return {name: np.stack([inputs[name] for inputs, _ in examples]) for name in examples[0][0]}
