"""The export-bug catalogue: small models, each with one bug users meet when they export, and clean
controls. ``tests/integration/test_catalogue.py`` checks every one with default options and
measures each truth itself (the artifact against eager at the same batch size).

Every model takes ``(N, 3, 32, 32)`` digit images and returns 10 logits.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


class Features(nn.Module):
    """A small conv trunk shared by the catalogue: 3x32x32 images to 64 features."""

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, padding=1)
        self.conv2 = nn.Conv2d(width, width, 3, stride=2, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(2)
        self.proj = nn.Linear(width * 4, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv2(F.relu(self.conv1(x))))
        return F.relu(self.proj(self.pool(x).flatten(1)))


class Clean(nn.Module):
    """Control: a plain convnet. Every float row must pass."""

    def __init__(self) -> None:
        super().__init__()
        self.features = Features()
        self.fc = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x))


class CleanLarge(nn.Module):
    """Control of a few million parameters (3.4 M): a wider convnet with a large MLP head."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
                                  nn.Conv2d(64, 128, 3, stride=2, padding=1), nn.BatchNorm2d(128), nn.ReLU(),
                                  nn.Conv2d(128, 128, 3, stride=2, padding=1), nn.BatchNorm2d(128), nn.ReLU())
        self.pool = nn.AdaptiveAvgPool2d(4)
        self.head = nn.Sequential(nn.Linear(128 * 16, 1024), nn.ReLU(), nn.Linear(1024, 512), nn.ReLU(), nn.Linear(512, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.pool(self.stem(x)).flatten(1))


class ValueBranch(Clean):
    """Branches on a tensor's value (the batch's mean brightness): tracing keeps the branch its
    example batch took. The golden set holds light and dark digits, so batches take both."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.features(x)
        if x.mean() > 0:
            h = h.flip(1)  # another order of the features
        return self.fc(h)


class BatchBranch(Clean):
    """The classic tutorial bug: a different path for large batches (``if x.size(0) > 32``). The
    trace of a batch of 16 bakes the small-batch path; at 48 it differs from eager."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.features(x)
        if x.size(0) > 32:
            h = torch.cat([self.features(part) for part in x.split(8)]) * 0.75
        return self.fc(h)


class BakedShape(Clean):
    """``int(x.shape[0])`` in a reshape: tracing records the example's batch size as a constant."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = int(x.shape[0])
        return self.fc(self.features(x).reshape(n, 64))


class ItemInForward(Clean):
    """``.item()`` in forward: a per-batch scale becomes the example batch's constant under trace.
    The fault is in the model's own forward, between its modules."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.features(x)
        scale = h.abs().amax().item()
        return self.fc(h / scale)


class TolistInForward(Clean):
    """``.tolist()`` in forward: per-sample values turned into Python numbers, baked by the trace."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.features(x)
        peaks = h.amax(dim=1).tolist()
        return self.fc(h - torch.tensor(peaks).unsqueeze(1) * 0.5)


class NumpyInForward(Clean):
    """numpy in forward: the trace bakes the value, and scripting cannot compile it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.features(x)
        centre = float(np.median(h.detach().numpy()))
        return self.fc(h - centre)


class Counter(Clean):
    """A Python-side counter in forward (a warm-up that scales the first calls): stateful."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.fc(self.features(x)) * (1.0 + 0.1 * min(self.calls, 50))


class Unscriptable(Clean):
    """An activation held as a lambda: fine in eager and under trace, but scripting cannot compile it."""

    def __init__(self) -> None:
        super().__init__()
        self.act = lambda t: t.clamp(min=0.0) * 1.5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.act(self.features(x)))


class AntialiasedResize(nn.Module):
    """Downsampling with ``antialias=True`` (what image pipelines use): eager and TorchScript run it,
    the TorchScript-based ONNX exporter has no such operator and prints its graph dump."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(8 * 15 * 15, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.conv(x))  # 32x32
        h = F.interpolate(h, size=(15, 15), mode="bilinear", align_corners=False, antialias=True)  # odd output size
        return self.fc(h.flatten(1))


class Int8Collapse(Clean):
    """One huge weight in a Linear: per-tensor int8 weights crush every other weight of ``fc2``
    (the channel it feeds is left out of the head, so the output is the crushed channels')."""

    def __init__(self) -> None:
        super().__init__()
        self.fc2 = nn.Linear(64, 64)
        with torch.no_grad():
            self.fc2.weight[0, 0] = 80.0 * float(self.fc2.weight.abs().max())
            self.fc.weight.mul_(20.0)
            self.fc.weight[:, 0] = 0.0
            self.fc.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(F.relu(self.fc2(self.features(x))))


class ClampHalf(nn.Module):
    """Clamps the first half of the features in place, through a view of its input (``narrow``).
    The TorchScript-based ONNX exporter drops the mutation: the graph has no node for it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x.narrow(1, 0, 32).clamp_(max=0.05)
        return x


class InplaceOnView(nn.Module):
    """An in-place op on a view (``x.narrow(1, 0, 32).clamp_()``) inside a module ``clamp``."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = Features()
        self.clamp = ClampHalf()
        self.fc = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.clamp(self.stem(x)))


class DropoutLeftOn(Clean):
    """Functional dropout with its default ``training=True``: random in eval mode too."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(F.dropout(self.features(x), 0.2))


class RandomOps(Clean):
    """Noise added in forward (``randn_like``), as a test-time augmentation left in."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.features(x)
        return self.fc(h + 0.05 * torch.randn_like(h))


class NoInputs(Clean):
    """A model whose output does not depend on its input beyond the batch size: its ONNX graph's
    only input is folded away."""

    def __init__(self) -> None:
        super().__init__()
        self.prior = nn.Parameter(torch.randn(1, 64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.prior).expand(16, 10)


class BatchCentred(Clean):
    """The model itself depends on the batch (features centred over the batch). Artifacts that follow
    it pass; its eager row says so."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.features(x)
        return self.fc(h - h.mean(dim=0, keepdim=True))


def _silu_scaled_wrong(g, x):  # the planted bug: x * sigmoid(1.1 x) where SiLU is x * sigmoid(x)
    scale = g.op("Constant", value_t=torch.tensor(1.1, dtype=torch.float32))
    return g.op("Mul", x, g.op("Sigmoid", g.op("Mul", x, scale)))


class WrongSymbolic(Clean):
    """A custom ONNX symbolic with a wrong formula (issue 44): SiLU exported as ``x * sigmoid(1.1 x)``. Registered only
    while an ONNX export traces the model (in that build's own child process), so no other export in any process is
    touched. Every ONNX row is wrong at every batch size alike, by far more than eager's own variation: no float-noise
    sentence and no advice to loosen a gate may be said of it."""

    @torch.jit.unused
    def plant(self) -> None:
        if torch.onnx.is_in_onnx_export():
            torch.onnx.register_custom_op_symbolic("aten::silu", _silu_scaled_wrong, 9)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.jit.is_scripting():  # a scripted model never plants it (TorchScript cannot compile the registration)
            self.plant()
        return self.fc(F.silu(self.features(x)))
