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
