"""Architectures for the bad-input and fault tests (tests/integration/test_bad_input.py, tests/integration/test_faults.py)."""

from __future__ import annotations

import torch
from torch import nn


class LogOfMargin(nn.Module):
    """Logits are ``log(head(features(x)))``.

    The test sets the head's bias so that on the golden inputs every float output sits a hair above
    zero. Float artifacts reproduce that exactly; int8 rounding of the head pushes some outputs below
    zero, where ``log`` gives NaN: a real model whose logits go non-finite in one artifact family only.
    """

    def __init__(self, num_classes: int = 10, in_channels: int = 3) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(in_channels, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten())
        self.head = nn.Linear(8 * 16, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(self.head(self.features(x)))


class DictOfLogits(nn.Module):
    """An image classifier that returns a dict (``{"scores": logits, "embedding": features}``): checked
    against a golden set recorded from a model of one output tensor, it cannot be compared."""

    def __init__(self, num_classes: int = 10, in_channels: int = 3) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(in_channels, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten())
        self.head = nn.Linear(8 * 4, num_classes)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        features = self.features(x)
        return {"scores": self.head(features), "embedding": features}


class EmptyOutput(nn.Module):
    """An image model whose second output has no values: ``(N, 0)``. Nothing in it can be compared."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten())
        self.head = nn.Linear(8 * 4, num_classes)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.head(self.features(x))
        return logits, logits[:, :0]


class NothingOut(nn.Module):
    """An image model whose one output has no values: ``(N, 0)`` logits."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x).mean((2, 3))[:, :0]


class CollidingNames(nn.Module):
    """A dict output whose flattened names collide: key ``"a.b"`` and key ``"a"`` holding ``{"b": ...}``
    both flatten to ``a.b``."""

    def __init__(self, features: int = 12) -> None:
        super().__init__()
        self.one = nn.Linear(features, 3)
        self.two = nn.Linear(features, 3)

    def forward(self, x: torch.Tensor) -> dict[str, object]:
        return {"a.b": self.one(x), "a": {"b": self.two(x)}}


class TokenBag(nn.Module):
    """Token ids ``(N, T)`` int64 in, ``(N, classes)`` logits out: an embedding bag. An id outside
    ``0 .. vocab-1`` (``-1``, ``2**62``) makes ``nn.Embedding`` raise ``IndexError``."""

    def __init__(self, vocab: int = 50, num_classes: int = 4) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, 8)
        self.head = nn.Linear(8, num_classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(ids).mean(1))


class BakedBatchSize(nn.Module):
    """Flattens with ``int(x.shape[0])``: a Python int, so ``torch.jit.trace`` bakes the example's batch
    size into the artifact, which then raises on a batch of any other size; eager takes any size."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2))
        self.head = nn.Linear(16, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).reshape(int(x.shape[0]), 16))
