"""SimpleCNN: three conv/ReLU/max-pool stages and a two-layer MLP head.

At the default ``image_size=224`` the first linear layer is the classic ``Linear(64*28*28, 128)``
(6.4 M parameters, ~25.7 MB float32); at ``image_size=32`` it is ``Linear(64*4*4, 128)``.
"""

from __future__ import annotations

import torch
from torch import nn


class SimpleCNN(nn.Module):
    def __init__(self, num_classes: int = 10, in_channels: int = 3, image_size: int = 224) -> None:
        super().__init__()
        if num_classes < 1 or in_channels < 1:
            raise ValueError(f"num_classes and in_channels must be >= 1, got {num_classes} and {in_channels}")
        if image_size < 8 or image_size % 8 != 0:
            raise ValueError(
                f"SimpleCNN needs image_size to be a positive multiple of 8 (three 2x2 max-pools), got {image_size}"
            )
        self.num_classes = num_classes
        self.in_channels = in_channels
        self.image_size = image_size
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 16, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        side = image_size // 8
        self.classifier = nn.Sequential(
            nn.Linear(64 * side * side, 128),
            nn.ReLU(),
            nn.Linear(128, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        x = x.flatten(1)
        return self.classifier(x)
