"""A model built on ``nn.LSTMCell`` only (issue 44): dynamic int8 converts the cell (torch's default dynamic mapping),
though the model has no nn.Linear, nn.LSTM or nn.GRU layer."""

from __future__ import annotations

import torch
from torch import nn


class CellReader(nn.Module):
    """Reads a (N, 3, 32, 32) image row by row with one LSTMCell; its last hidden state (10 values) is the logits."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.cell = nn.LSTMCell(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.mean(dim=1)  # (N, 32, 32)
        h = c = torch.zeros(rows.shape[0], self.cell.hidden_size, dtype=rows.dtype)
        for t in range(rows.shape[1]):
            h, c = self.cell(rows[:, t], (h, c))
        return h * 10.0
