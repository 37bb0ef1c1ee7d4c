"""Architectures for the diagnostics tests: each breaks one exporter in a known, realistic way."""

from __future__ import annotations

import torch
from torch import nn


class BakedBatch(nn.Module):
    """Flattens with ``int(x.shape[0])``: dynamic in eager and under ``torch.jit.script``, but
    ``torch.jit.trace`` (and the TorchScript-based ONNX export) record the Python int as the constant
    batch size of the example, so the artifact only accepts that batch size."""

    def __init__(self, num_classes: int = 10, in_channels: int = 3) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(in_channels, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4))
        self.head = nn.Linear(8 * 16, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch = int(x.shape[0])
        return self.head(self.features(x).reshape(batch, -1))


class ScaledWhenTraced(nn.Module):
    """Identity in eager and in ``torch.jit.script``; under tracing (``torch.jit.trace`` and the
    TorchScript-based ONNX export, which traces) it scales by 1.01: a wrong operator that only the
    exported artifact has."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.jit.is_tracing():
            return x * 1.01
        return x


class Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, quirk: bool = False) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu1 = nn.ReLU()
        self.quirk: nn.Module = ScaledWhenTraced() if quirk else nn.Identity()
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu2 = nn.ReLU()
        self.downsample: nn.Module = (
            nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))
            if stride != 1 or cin != cout else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = self.downsample(x)
        out = self.quirk(self.relu1(self.bn1(self.conv1(x))))
        return self.relu2(self.bn2(self.conv2(out)) + identity)


class QuirkyResNet(nn.Module):
    """A small ResNet whose third block (``layers.2``) holds :class:`ScaledWhenTraced` as ``quirk``."""

    def __init__(self, num_classes: int = 10, in_channels: int = 3) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(in_channels, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.layers = nn.Sequential(
            Block(8, 8, 1), Block(8, 16, 2), Block(16, 16, 1, quirk=True), Block(16, 32, 2)
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.pool(self.layers(self.stem(x))).flatten(1))


class OutlierMLP(nn.Module):
    """Conv features and three Linear layers; ``fc2`` carries one huge weight, so per-tensor int8
    weight quantization crushes its other weights. The per-layer int8 table must rank it worst."""

    def __init__(self, num_classes: int = 10, in_channels: int = 3) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(in_channels, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten())
        self.fc1 = nn.Linear(128, 64)
        self.relu1 = nn.ReLU()
        self.fc2 = nn.Linear(64, 64)
        self.relu2 = nn.ReLU()
        self.fc3 = nn.Linear(64, num_classes)
        with torch.no_grad():
            self.fc2.weight[0, 0] = 60.0 * float(self.fc2.weight.abs().max())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc3(self.relu2(self.fc2(self.relu1(self.fc1(self.features(x))))))


class NoisyWhenScripted(nn.Module):
    """Deterministic in eager and under ``torch.jit.trace``; under ``torch.jit.script`` it adds fresh
    uniform noise of up to 4e-6 to every logit on every call. Small enough to pass the drift gate (MAE
    1e-5) and the batch-size check, but two runs of the same batch differ by more than the determinism
    bound (a tenth of the float gate, 1e-6): only the rerun can catch it."""

    def __init__(self, num_classes: int = 10, in_channels: int = 3) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(in_channels, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.fc = nn.Linear(8, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.fc(self.features(x))
        if torch.jit.is_scripting():
            out = out + 4e-6 * torch.rand_like(out)
        return out


class QuirkyDetector(nn.Module):
    """A detector's two heads on one trunk: class ``logits`` first, then ``boxes`` (four offsets per image),
    whose ``box.1`` is :class:`ScaledWhenTraced`: a fault on the *second* output only (issue 44, item 2)."""

    def __init__(self, num_classes: int = 10, in_channels: int = 3) -> None:
        super().__init__()
        self.trunk = nn.Sequential(nn.Conv2d(in_channels, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten())
        self.cls = nn.Linear(32, num_classes)
        self.box = nn.Sequential(nn.Linear(32, 4), ScaledWhenTraced())

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.trunk(x)
        return self.cls(features), self.box(features)


class QuirkyDetectorForward(QuirkyDetector):
    """:class:`QuirkyDetector` whose fault sits in the model's own forward, on the second output: traced, the boxes
    are scaled by 1.01 after ``box`` returns (no module of its own departs; the model's second output does)."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.trunk(x)
        boxes = self.box[0](features)
        return self.cls(features), boxes * 1.01 if torch.jit.is_tracing() else boxes


class NormalizedEmbedding(nn.Module):
    """Conv features, ``F.normalize`` (its ``eps`` 1e-12 is a ``Constant`` node in the ONNX graph, which the float16
    converter clips to 5.96e-8), then a classifier: the reducer must hand over a node that computes, not the constant."""

    def __init__(self, num_classes: int = 10, in_channels: int = 3) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(in_channels, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten())
        self.fc = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(nn.functional.normalize(self.features(x), dim=1))


class KitDetector(nn.Module):
    """A face detector's three heads on one trunk, unnamed, as kit models return them: class probabilities (``nn.Softmax``,
    as RetinaFace's eval mode), box offsets ``(batch, 4)`` and five landmarks ``(batch, 10)``."""

    def __init__(self, features: int = 12) -> None:
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(features, 16), nn.ReLU())
        self.scores = nn.Sequential(nn.Linear(16, 2), nn.Softmax(dim=-1))
        self.boxes = nn.Linear(16, 4)
        self.landmarks = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        f = self.trunk(x)
        return self.scores(f), self.boxes(f), self.landmarks(f)


class KitVoiceActivity(nn.Module):
    """A voice-activity model: an LSTM over frames, its last step classified (speech or not, raw logits), and its carried
    state returned for the next chunk, ``(out, (h, c))`` as a streaming model hands it on."""

    def __init__(self, features: int = 6, hidden: int = 16) -> None:
        super().__init__()
        self.rnn = nn.LSTM(features, hidden, batch_first=True)
        self.head = nn.Linear(hidden, 2)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        out, (h, c) = self.rnn(x)
        return self.head(out[:, -1]), (h.squeeze(0), c.squeeze(0))


class KitDetectorBoxesOnly(nn.Module):
    """Only :class:`KitDetector`'s box head: one unnamed ``(batch, 4)`` output from a Linear, nothing to tell it from scores."""

    def __init__(self, features: int = 12) -> None:
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(features, 16), nn.ReLU())
        self.boxes = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.boxes(self.trunk(x))
