"""Architectures that only the tests use: each breaks one exporter in a known, realistic way."""

from __future__ import annotations

import logging
from typing import NamedTuple

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


# --- models of several inputs and outputs (golden format 2) -------------------------------------------


class MaskedSequenceNet(nn.Module):
    """Two inputs: ``x`` (N, T, F) float features and ``mask`` (N, T) int64 (1 = a real position);
    one output, (N, classes) logits from the masked mean over time. T may change between samples."""

    def __init__(self, features: int = 6, num_classes: int = 5) -> None:
        super().__init__()
        self.embed = nn.Linear(features, 16)
        self.head = nn.Linear(16, num_classes)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        weights = mask.to(x.dtype).unsqueeze(-1)
        pooled = (torch.tanh(self.embed(x)) * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)
        return self.head(pooled)


class TupleOutputNet(nn.Module):
    """One (N, F) input; a tuple out: (N, classes) logits and an (N, 8) embedding."""

    def __init__(self, features: int = 12, num_classes: int = 4) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(features, 8), nn.Tanh())
        self.head = nn.Linear(8, num_classes)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        embedding = self.body(x)
        return self.head(embedding), embedding


class SecondHeadBranch(TupleOutputNet):
    """``TupleOutputNet`` whose second output moves by 0.01 when more than 8 samples come at once (a
    detector's probability head with ``if x.shape[0] > 8``): a trace keeps the branch its example took."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        embedding = self.body(x)
        second = embedding + 0.01 if x.shape[0] > 8 else embedding
        return self.head(embedding), second


class EnergyNet(nn.Module):
    """One (N, F) input; one value per sample out, shape (N,): an energy, a regression score."""

    def __init__(self, features: int = 12) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(features, 8), nn.Tanh())
        self.head = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x)).squeeze(-1)


class EnergyColumnNet(EnergyNet):
    """``EnergyNet`` returning its energy as an (N, 1) column: the format-1 set export-check recorded for
    ``EnergyNet`` before issue 25 (same weights)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


class EnergyTupleNet(EnergyNet):
    """``EnergyNet`` returning a tuple: an (N, 8) embedding and the (N,) energy."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # type: ignore[override]
        embedding = self.body(x)
        return embedding, self.head(embedding).squeeze(-1)


class EnergyOut(NamedTuple):
    embedding: torch.Tensor
    energy: torch.Tensor


class EnergyNamedNet(EnergyNet):
    """``EnergyTupleNet`` returning a named tuple: its outputs are named by its fields, ``embedding`` and ``energy``."""

    def forward(self, x: torch.Tensor) -> EnergyOut:  # type: ignore[override]
        embedding = self.body(x)
        return EnergyOut(embedding, self.head(embedding).squeeze(-1))


# what ColouredMessages logs while ONNX exports it: a multi-line table, as quantizers log theirs
DUMP = "calibration table:\n" + "\n".join(f"  fc.{i}   int8   scale {0.01 * (i + 1):.4f}   zero point 0" for i in range(40))


class ColouredMessages(nn.Module):
    """Says things in terminal colours, as exporters do: a coloured warning while ONNX exports it, a
    coloured error when ``torch.jit.trace`` traces it; and logs a multi-line table while ONNX exports it,
    as quantizers dump theirs."""

    def __init__(self, features: int = 12, num_classes: int = 4) -> None:
        super().__init__()
        self.fc = nn.Linear(features, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import warnings

        if torch.onnx.is_in_onnx_export():
            warnings.warn("\x1b[96mcoloured\x1b[0m exporter warning", stacklevel=2)
            logging.getLogger("exporter.dump").warning(DUMP)
        elif torch.jit.is_tracing():
            raise RuntimeError("\x1b[91mcannot\x1b[0m be \x1b[1mtraced\x1b[0m")
        return self.fc(x)


class DictOutputNet(nn.Module):
    """One (N, F) input; a dict out: ``scores`` (N, classes) and ``boxes`` (N, 3, 4)."""

    def __init__(self, features: int = 12, num_classes: int = 4) -> None:
        super().__init__()
        self.scores = nn.Linear(features, num_classes)
        self.boxes = nn.Linear(features, 12)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"scores": self.scores(x), "boxes": torch.sigmoid(self.boxes(x)).reshape(-1, 3, 4)}


class TimeMajorNet(nn.Module):
    """Batch-first (N, T, F) in, time-major (T, N, classes) per-step logits out, as CTC heads return them."""

    def __init__(self, features: int = 6, num_classes: int = 5) -> None:
        super().__init__()
        self.step = nn.Linear(features, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.step(x).transpose(0, 1)


class KeywordMaskNet(MaskedSequenceNet):
    """``MaskedSequenceNet`` whose mask is keyword-only: ``forward(x, *, mask)``."""

    def forward(self, x: torch.Tensor, *, mask: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return super().forward(x, mask)


class NoneInTupleNet(TupleOutputNet):
    """Returns ``(logits, None)``: an output structure export-check cannot record."""

    def forward(self, x: torch.Tensor):  # type: ignore[override]
        return super().forward(x)[0], None


class StringOutputNet(TupleOutputNet):
    """Returns ``{"logits": tensor, "label": "cat"}``: a string among the outputs."""

    def forward(self, x: torch.Tensor):  # type: ignore[override]
        return {"logits": super().forward(x)[0], "label": "cat"}


class HeadsNet(nn.Module):
    """Four heads that default to different kinds: class scores, their (confident) softmax, an L2-normalised embedding, one value per sample."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(12, 16)
        self.cls = nn.Linear(16, 3)
        self.embed = nn.Linear(16, 8)
        self.score = nn.Linear(16, 1)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        h = torch.relu(self.body(x))
        logits = self.cls(h)
        return {"logits": logits, "probs": torch.softmax(40 * logits, dim=-1),
                "embedding": nn.functional.normalize(self.embed(h), dim=-1), "score": self.score(h)}


class EncoderHeadsNet(nn.Module):
    """``x (N, L, 6)`` -> hidden states after LayerNorm under a name that says nothing (``encoded``), per-position
    ``tags``, and from the mean over positions a sigmoid box head ``boxes (N, 4)`` and class ``logits (N, 3)``."""

    def __init__(self, features: int = 6, dim: int = 16) -> None:
        super().__init__()
        self.proj = nn.Linear(features, dim)
        self.norm = nn.LayerNorm(dim)
        self.tags = nn.Linear(dim, 5)
        self.box = nn.Linear(dim, 4)
        self.cls = nn.Linear(dim, 3)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        h = self.norm(torch.relu(self.proj(x)))
        pooled = h.mean(1)
        return {"encoded": h, "tags": self.tags(h), "boxes": torch.sigmoid(self.box(pooled)), "logits": self.cls(pooled)}
