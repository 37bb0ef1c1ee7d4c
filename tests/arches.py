"""Architectures that only the tests use: each breaks one exporter in a known, realistic way."""

from __future__ import annotations

import torch
from torch import nn


class BranchOnBrightness(nn.Module):
    """Picks a head by the batch's mean brightness (dark-on-light vs light-on-dark scans).

    ``torch.jit.trace`` records only the branch its example batch took and bakes it in, so on a
    batch of the other kind the trace silently computes the wrong head; ``torch.jit.script`` keeps
    the ``if``.
    """

    def __init__(self, num_classes: int = 10, in_channels: int = 3) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten()
        )
        self.dark_head = nn.Linear(8 * 16, num_classes)
        self.light_head = nn.Linear(8 * 16, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        feats = self.features(x)
        if bool(x.mean() > 0):
            return self.light_head(feats)
        return self.dark_head(feats)


class TinyNet(nn.Module):
    """A small conv net for fast tests; trained weights come from the tests themselves or not at all."""

    def __init__(self, num_classes: int = 10, in_channels: int = 3) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(in_channels, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten(),
        )
        self.head = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


class AllConv(nn.Module):
    """A fully convolutional classifier: no nn.Linear, LSTM or GRU, so dynamic int8 does not apply."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, num_classes, 3, padding=1),
                                  nn.AdaptiveAvgPool2d(1), nn.Flatten())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)
