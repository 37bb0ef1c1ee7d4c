"""ResNet: a small ResNet-style network built from BasicBlocks.

Stem ``conv3x3 -> BatchNorm -> ReLU``, then one stage per entry of ``widths`` (the first at
stride 1, the others at stride 2), each of ``blocks_per_stage`` BasicBlocks
(``conv-BN-ReLU-conv-BN`` plus a residual add; a ``1x1 conv + BN`` downsample on the shortcut
when the stride or the channel count changes), global average pool and a linear head.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


class BasicBlock(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.relu2 = nn.ReLU()
        if stride != 1 or in_channels != out_channels:
            self.downsample: nn.Module = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False),
                nn.BatchNorm2d(out_channels),
            )
        else:
            self.downsample = nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = self.downsample(x)
        out = self.relu1(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu2(out + identity)


class ResNet(nn.Module):
    def __init__(
        self,
        num_classes: int = 10,
        in_channels: int = 3,
        image_size: int = 32,
        widths: Sequence[int] = (16, 32, 64),
        blocks_per_stage: int = 1,
    ) -> None:
        super().__init__()
        widths = tuple(int(w) for w in widths)
        if num_classes < 1 or in_channels < 1:
            raise ValueError(f"num_classes and in_channels must be >= 1, got {num_classes} and {in_channels}")
        if not widths or any(w < 1 for w in widths):
            raise ValueError(f"widths must be a non-empty sequence of positive ints, got {widths}")
        if blocks_per_stage < 1:
            raise ValueError(f"blocks_per_stage must be >= 1, got {blocks_per_stage}")
        min_size = 2 ** (len(widths) - 1)
        if image_size < min_size:
            raise ValueError(f"image_size must be >= {min_size} for {len(widths)} stages, got {image_size}")
        self.num_classes = num_classes
        self.in_channels = in_channels
        self.image_size = image_size
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, widths[0], 3, stride=1, padding=1, bias=False),
            nn.BatchNorm2d(widths[0]),
            nn.ReLU(),
        )
        blocks = []
        channels = widths[0]
        for stage, width in enumerate(widths):
            for index in range(blocks_per_stage):
                stride = 2 if stage > 0 and index == 0 else 1
                blocks.append(BasicBlock(channels, width, stride))
                channels = width
        self.layers = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(channels, num_classes)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        x = self.layers(x)
        x = self.pool(x).flatten(1)
        return self.fc(x)
