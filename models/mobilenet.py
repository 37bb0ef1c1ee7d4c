"""MobileNetV2: a small MobileNetV2-style network of inverted residual blocks.

Each block is ``1x1 expand conv -> BN -> ReLU6`` (skipped when the expansion is 1),
``3x3 depthwise conv (groups=channels) -> BN -> ReLU6``, ``1x1 project conv -> BN`` (linear
bottleneck), plus a residual add when the stride is 1 and the channel count is unchanged.
The stem and the final 1x1 conv use Hardswish; then global average pool and a linear head
(no dropout).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

# (expansion t, output channels c, repeats n, first stride s), as in the MobileNetV2 paper, scaled
# down for 32x32 inputs.
DEFAULT_SETTINGS: tuple[tuple[int, int, int, int], ...] = (
    (1, 16, 1, 1),
    (4, 24, 2, 2),
    (4, 32, 2, 2),
    (4, 64, 2, 2),
)


class InvertedResidual(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, stride: int, expand_ratio: int) -> None:
        super().__init__()
        hidden = in_channels * expand_ratio
        self.use_residual: bool = stride == 1 and in_channels == out_channels
        layers: list[nn.Module] = []
        if expand_ratio != 1:
            layers += [nn.Conv2d(in_channels, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6()]
        layers += [
            nn.Conv2d(hidden, hidden, 3, stride=stride, padding=1, groups=hidden, bias=False),
            nn.BatchNorm2d(hidden),
            nn.ReLU6(),
            nn.Conv2d(hidden, out_channels, 1, bias=False),
            nn.BatchNorm2d(out_channels),
        ]
        self.conv = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.use_residual:
            return x + self.conv(x)
        return self.conv(x)


class MobileNetV2(nn.Module):
    def __init__(
        self,
        num_classes: int = 10,
        in_channels: int = 3,
        image_size: int = 32,
        stem_channels: int = 16,
        last_channels: int = 128,
        settings: Sequence[Sequence[int]] = DEFAULT_SETTINGS,
    ) -> None:
        super().__init__()
        settings = tuple(tuple(int(v) for v in row) for row in settings)
        if num_classes < 1 or in_channels < 1:
            raise ValueError(f"num_classes and in_channels must be >= 1, got {num_classes} and {in_channels}")
        if not settings or any(len(row) != 4 or min(row) < 1 for row in settings):
            raise ValueError(f"settings must be non-empty (t, c, n, s) rows of positive ints, got {settings}")
        min_size = 1
        for _, _, _, stride in settings:
            min_size *= stride
        if image_size < min_size:
            raise ValueError(f"image_size must be >= {min_size} for these strides, got {image_size}")
        self.num_classes = num_classes
        self.in_channels = in_channels
        self.image_size = image_size
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, stem_channels, 3, stride=1, padding=1, bias=False),
            nn.BatchNorm2d(stem_channels),
            nn.Hardswish(),
        )
        blocks: list[nn.Module] = []
        channels = stem_channels
        for expand, out_channels, repeats, first_stride in settings:
            for index in range(repeats):
                blocks.append(InvertedResidual(channels, out_channels, first_stride if index == 0 else 1, expand))
                channels = out_channels
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Sequential(
            nn.Conv2d(channels, last_channels, 1, bias=False),
            nn.BatchNorm2d(last_channels),
            nn.Hardswish(),
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(last_channels, num_classes)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out")
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, 0.0, 0.01)
                nn.init.zeros_(module.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        x = self.blocks(x)
        x = self.head(x)
        x = self.pool(x).flatten(1)
        return self.classifier(x)
