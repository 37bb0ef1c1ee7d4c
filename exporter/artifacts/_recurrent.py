"""Recurrent layers as a loop an exported program keeps: ``nn.LSTM`` rewritten over ``torch.scan``.

``torch.export`` decomposes ``nn.LSTM`` into one cell per time step of the example, so the program
is pinned to that many steps (``image.size()[3] // 4 == 12``; pytorch/pytorch#115092). ExecuTorch
(1.5+) emits the ``scan`` higher-order op as a loop in the program, so the same recurrence written
over ``torch._higher_order_ops.scan`` keeps its time axis free: the same weights (copied as buffers),
the same gate order (i, f, g, o) and equations as ``torch.nn.LSTM``; the input projection of every
step is one matrix product before the loop. GRU and plain RNN layers are not rewritten.
"""

from __future__ import annotations

import copy
from typing import Any

from .base import NotApplicable

RECURRENCE = "nn.LSTM exported as a torch.scan loop (same weights and equations; torch.export's own LSTM decomposition fixes the time steps)"


def _scan_lstm_class() -> Any:
    import torch
    import torch.nn.functional as F
    from torch._higher_order_ops.scan import scan

    class ScanLSTM(torch.nn.Module):
        """``torch.nn.LSTM`` (no projection, eval: no dropout) over ``scan``: ``forward(x, hx=None) -> (y, (h_n, c_n))``."""

        def __init__(self, lstm: torch.nn.LSTM) -> None:
            super().__init__()
            self.layers, self.hidden, self.batch_first = lstm.num_layers, lstm.hidden_size, lstm.batch_first
            self.directions = 2 if lstm.bidirectional else 1
            self.has_bias = lstm.bias
            for name in lstm._flat_weights_names:
                self.register_buffer(name, getattr(lstm, name).detach().clone())

        def _direction(self, x: Any, h0: Any, c0: Any, layer: int, suffix: str, reverse: bool) -> tuple[Any, Any, Any]:
            w_ih, w_hh = getattr(self, f"weight_ih_l{layer}{suffix}"), getattr(self, f"weight_hh_l{layer}{suffix}")
            bias = getattr(self, f"bias_ih_l{layer}{suffix}") + getattr(self, f"bias_hh_l{layer}{suffix}") if self.has_bias else None
            projected = F.linear(x, w_ih, bias)  # (T, N, 4H): every step's input term at once

            def step(carry: tuple[Any, Any], gates: Any) -> tuple[tuple[Any, Any], Any]:
                h, c = carry
                i, f, g, o = (gates + F.linear(h, w_hh)).chunk(4, dim=-1)
                c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
                h = torch.sigmoid(o) * torch.tanh(c)
                return (h, c), h.clone()

            (h, c), ys = scan(step, (h0, c0), projected, reverse=reverse)
            return ys, h, c

        def forward(self, x: Any, hx: Any = None) -> tuple[Any, tuple[Any, Any]]:
            if self.batch_first:
                x = x.transpose(0, 1)
            hs, cs = [], []
            for layer in range(self.layers):
                outs = []
                for d in range(self.directions):
                    k = layer * self.directions + d
                    if hx is None:  # a fresh tensor each: a carry may not alias another (scan refuses it)
                        h0, c0 = x.new_zeros(x.shape[1], self.hidden), x.new_zeros(x.shape[1], self.hidden)
                    else:
                        h0, c0 = hx[0][k].clone(), hx[1][k].clone()
                    y, h, c = self._direction(x, h0, c0, layer, "_reverse" if d else "", reverse=bool(d))
                    outs.append(y)
                    hs.append(h)
                    cs.append(c)
                x = torch.cat(outs, dim=-1) if len(outs) > 1 else outs[0]
            if self.batch_first:
                x = x.transpose(0, 1)
            return x, (torch.stack(hs), torch.stack(cs))

    return ScanLSTM


def recurrent_types(model: Any) -> set[str]:
    import torch

    return {type(m).__name__ for m in model.modules() if isinstance(m, (torch.nn.LSTM, torch.nn.GRU, torch.nn.RNN))}


def with_scan_lstm(model: Any) -> tuple[Any, int]:
    """A copy of ``model`` with every ``nn.LSTM`` replaced by its ``scan`` form: (copy, how many). NotApplicable
    for a GRU, a plain RNN or an LSTM with a projection, which are not rewritten."""
    import torch

    others = recurrent_types(model) - {"LSTM"}
    projected = [n for n, m in model.named_modules() if isinstance(m, torch.nn.LSTM) and m.proj_size]
    if others or projected:
        what = "/".join(sorted(others)) or f"LSTM with proj_size ({', '.join(projected)})"
        raise NotApplicable(f"not applicable: torch.export fixes the time steps of a {what} (pytorch/pytorch#115092), and "
                            "export-check rewrites only nn.LSTM (without a projection) as a loop the program keeps")
    ScanLSTM = _scan_lstm_class()
    model = copy.deepcopy(model).eval()
    count = 0
    for name, module in list(model.named_modules()):
        if isinstance(module, torch.nn.LSTM) and not name:  # the model is one LSTM
            return ScanLSTM(module), 1
        if isinstance(module, torch.nn.LSTM):
            parent = model.get_submodule(name.rpartition(".")[0]) if "." in name else model
            setattr(parent, name.rpartition(".")[2], ScanLSTM(module))
            count += 1
    return model, count
