"""The bundled training/golden data: scikit-learn's handwritten digits, through the tool's preprocessing.

``sklearn.datasets.load_digits()`` ships inside scikit-learn (no download): 1797 scanned
handwritten digits, 8x8 pixels with values 0..16, 10 classes. It is a copy of the test set of
the UCI "Optical Recognition of Handwritten Digits" data set (Alpaydin & Kaynak, 1998),
licensed CC BY 4.0.

Every digit becomes an 8-bit grayscale PIL image (:func:`digit_to_image`), the same image that
is written as a PNG golden file, and then goes through ``export_check.golden.inputs.preprocess_image``
with :data:`DIGITS_PREPROCESS`. Training, golden recording and replay therefore see bit-identical
inputs.

The split is a fixed, stratified one made with NumPy's legacy ``RandomState`` (whose stream is
frozen across NumPy versions), not with scikit-learn's splitters, so it does not change when
scikit-learn does: 36 test digits per class (360 in all), the rest for training. Test indices
are kept in ascending dataset order; the first 64 of them are the golden images.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

_REPO = Path(__file__).resolve().parents[1]
if str(_REPO) not in sys.path:  # so `export_check.golden.inputs` imports when run from elsewhere
    sys.path.insert(0, str(_REPO))

from export_check.golden.inputs import Preprocess, preprocess_image  # noqa: E402

DIGITS_PREPROCESS = Preprocess(
    size=(32, 32), mode="RGB", mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5), interpolation="bilinear"
)
NUM_CLASSES = 10
SPLIT_SEED = 0
TEST_PER_CLASS = 36
TEST_SIZE = TEST_PER_CLASS * NUM_CLASSES  # 360
GOLDEN_COUNT = 64


def load_digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """All 1797 digits as ``(images float64 N x 8 x 8 in 0..16, labels int64 N)``, in dataset order."""
    from sklearn.datasets import load_digits

    data = load_digits()
    return np.asarray(data.images, dtype=np.float64), np.asarray(data.target, dtype=np.int64)


def digit_to_image(arr: np.ndarray):  # -> PIL.Image.Image
    """One 8x8 digit (values 0..16) as an 8-bit grayscale ``L`` image, exactly as saved to PNG."""
    from PIL import Image

    arr = np.asarray(arr, dtype=np.float64)
    if arr.shape != (8, 8):
        raise ValueError(f"expected an 8x8 digit, got shape {arr.shape}")
    return Image.fromarray(np.round(arr * 255 / 16).astype(np.uint8), mode="L")


def digits_split(labels: np.ndarray | None = None, seed: int = SPLIT_SEED) -> tuple[np.ndarray, np.ndarray]:
    """Deterministic stratified split: ``(train_indices, test_indices)``, each sorted ascending.

    ``TEST_PER_CLASS`` digits of each class go to the test split, chosen by a
    ``np.random.RandomState(seed)`` permutation of that class's indices.
    """
    if labels is None:
        labels = load_digits_arrays()[1]
    labels = np.asarray(labels)
    rng = np.random.RandomState(seed)
    test: list[np.ndarray] = []
    for cls in range(NUM_CLASSES):
        members = np.flatnonzero(labels == cls)
        if len(members) <= TEST_PER_CLASS:
            raise ValueError(f"class {cls} has only {len(members)} digits")
        test.append(members[rng.permutation(len(members))[:TEST_PER_CLASS]])
    test_idx = np.sort(np.concatenate(test))
    train_idx = np.setdiff1d(np.arange(len(labels)), test_idx)  # sorted
    return train_idx, test_idx


def golden_indices(count: int = GOLDEN_COUNT) -> np.ndarray:
    """Dataset indices of the golden digits: the first ``count`` test indices (``count`` <= 360)."""
    _, test_idx = digits_split()
    if not 0 < count <= len(test_idx):
        raise ValueError(f"count must be in 1..{len(test_idx)}, got {count}")
    return test_idx[:count]


def preprocess_digits(images: np.ndarray, spec: Preprocess = DIGITS_PREPROCESS) -> np.ndarray:
    """``float32`` array ``N x C x H x W``: each digit through :func:`digit_to_image` and ``preprocess_image``."""
    return np.stack([preprocess_image(digit_to_image(img), spec) for img in images]).astype(np.float32)
